package gossip

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"hash/crc32"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/params"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata")

var testFP = params.NewFingerprint(
	params.MustLayout(params.TensorSpec{Name: "w", Shape: []int{4}}), "synthetic", "test")

func testSnapshot(n int, seed uint64) params.Snapshot {
	r := rand.New(rand.NewPCG(seed, 1))
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return params.Snapshot{Fingerprint: testFP, Step: 42, Progress: 1344.5, Params: v}
}

func encode(t testing.TB, w FrameWriter, s params.Snapshot) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := w.WriteFrame(&b, s); err != nil {
		t.Fatalf("WriteFrame: %v", err)
	}
	return b.Bytes()
}

// craftFrame builds a frame with any header fields and payload bytes and a
// correct checksum, as a hostile but careful peer would.
func craftFrame(h FrameHeader, payload []byte) []byte {
	h.Checksum = crc32.Checksum(payload, castagnoli)
	hb := h.Marshal()
	return append(hb[:], payload...)
}

func fp32Payload(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

func TestFrameRoundTripFP32(t *testing.T) {
	for _, zc := range []bool{true, false} {
		for _, n := range []int{1, 1023, 1024, 1025, 5000} {
			t.Run("", func(t *testing.T) {
				defer func(old bool) { zeroCopy = old }(zeroCopy)
				zeroCopy = zc
				s := testSnapshot(n, uint64(n))
				b := encode(t, FrameWriter{ChunkSize: MinChunkSize}, s)
				if want := FrameHeaderSize + 4*n; len(b) != want {
					t.Fatalf("frame of %d bytes, want %d", len(b), want)
				}
				got, err := FrameReader{Limits: Limits{Fingerprint: testFP, Elements: n}}.ReadFrame(bytes.NewReader(b))
				if err != nil {
					t.Fatalf("zeroCopy=%v n=%d: %v", zc, n, err)
				}
				if got.Fingerprint != s.Fingerprint || got.Step != s.Step || got.Progress != s.Progress {
					t.Errorf("metadata %+v, want %+v", got, s)
				}
				for i := range s.Params {
					if math.Float32bits(got.Params[i]) != math.Float32bits(s.Params[i]) {
						t.Fatalf("element %d: %g, want %g", i, got.Params[i], s.Params[i])
					}
				}
			})
		}
	}
}

func TestFrameRoundTripFP16(t *testing.T) {
	s := testSnapshot(3001, 7)
	b := encode(t, FrameWriter{DType: FP16, ChunkSize: MinChunkSize}, s)
	if want := FrameHeaderSize + 2*len(s.Params); len(b) != want {
		t.Fatalf("frame of %d bytes, want %d", len(b), want)
	}
	if h, _ := ParseFrameHeader(b); h.DType != FP16 {
		t.Fatalf("dtype %v, want fp16", h.DType)
	}
	got, err := FrameReader{Limits: Limits{Fingerprint: testFP}}.ReadFrame(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range s.Params {
		// fp16 keeps 11 significant bits: relative error <= 2^-11 for
		// normal values; these samples are all normal in fp16.
		if d := math.Abs(float64(got.Params[i] - want)); d > math.Abs(float64(want))/2048+1e-7 {
			t.Fatalf("element %d: %g, want %g within fp16 rounding", i, got.Params[i], want)
		}
	}
}

func TestFrameFP16FallsBackOnOverflow(t *testing.T) {
	s := testSnapshot(10, 1)
	s.Params[3] = 1e5
	b := encode(t, FrameWriter{DType: FP16}, s)
	h, err := ParseFrameHeader(b)
	if err != nil || h.DType != FP32 {
		t.Fatalf("header %+v, %v: want fp32 fallback", h, err)
	}
	got, err := FrameReader{}.ReadFrame(bytes.NewReader(b))
	if err != nil || got.Params[3] != 1e5 {
		t.Fatalf("got %v, %v", got.Params, err)
	}
}

func TestFrameWriterRefusesBadSnapshots(t *testing.T) {
	nan := testSnapshot(4, 1)
	nan.Params[2] = float32(math.NaN())
	neg := testSnapshot(4, 1)
	neg.Progress = -1
	for name, tc := range map[string]struct {
		w    FrameWriter
		s    params.Snapshot
		want error
	}{
		"empty":          {FrameWriter{}, params.Snapshot{Fingerprint: testFP}, ErrBadSnapshot},
		"nan":            {FrameWriter{}, nan, ErrBadSnapshot},
		"progress":       {FrameWriter{}, neg, ErrBadSnapshot},
		"chunk size":     {FrameWriter{ChunkSize: 1000}, testSnapshot(4, 1), ErrBadConfig},
		"unknown dtype":  {FrameWriter{DType: 9}, testSnapshot(4, 1), ErrBadConfig},
		"chunk too big":  {FrameWriter{ChunkSize: MaxChunkSize + 4}, testSnapshot(4, 1), ErrBadConfig},
		"chunk too tiny": {FrameWriter{ChunkSize: 8}, testSnapshot(4, 1), ErrBadConfig},
	} {
		var b bytes.Buffer
		if err := tc.w.WriteFrame(&b, tc.s); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
		if b.Len() != 0 {
			t.Errorf("%s: wrote %d bytes before refusing", name, b.Len())
		}
	}
}

// Every hostile frame is refused with the reason it is counted under.
func TestReadFrameHostile(t *testing.T) {
	good := testSnapshot(64, 3)
	hdr := func() FrameHeader {
		return FrameHeader{DType: FP32, Fingerprint: testFP, Elements: 64, Step: 1, Progress: 10, ChunkSize: MinChunkSize}
	}
	payload := fp32Payload(good.Params)
	with := func(f func(*FrameHeader)) []byte { h := hdr(); f(&h); return craftFrame(h, payload) }
	flip := func(b []byte, i int) []byte { b = bytes.Clone(b); b[i] ^= 0x40; return b }
	nanPayload := fp32Payload(append([]float32{float32(math.NaN())}, good.Params[1:]...))
	infPayload := fp32Payload(append([]float32{float32(math.Inf(-1))}, good.Params[1:]...))
	valid := craftFrame(hdr(), payload)
	lim := Limits{Fingerprint: testFP, Elements: 64, MaxElements: 1000}

	tests := []struct {
		name  string
		frame []byte
		lim   Limits
		want  Reason
	}{
		{"garbage", []byte(strings.Repeat("GET / HTTP/1.1\r\n", 10)), lim, ReasonBadMagic},
		{"empty stream", nil, lim, ReasonShortRead},
		{"header cut short", valid[:40], lim, ReasonShortRead},
		{"payload cut short", valid[:len(valid)-1], lim, ReasonShortRead},
		{"version 3", func() []byte { b := bytes.Clone(valid); b[4] = 3; return b }(), lim, ReasonBadVersion},
		{"other fingerprint", with(func(h *FrameHeader) { h.Fingerprint[0] ^= 1 }), lim, ReasonFingerprint},
		{"10 GB claimed", with(func(h *FrameHeader) { h.Elements = 10 << 30 / 4 }), lim, ReasonOversize},
		{"above absolute cap", with(func(h *FrameHeader) { h.Elements = params.MaxElements + 1 }), Limits{}, ReasonOversize},
		{"unexpected size", with(func(h *FrameHeader) { h.Elements = 63 }), lim, ReasonSizeMismatch},
		{"payload bit flip", flip(valid, FrameHeaderSize+5), lim, ReasonChecksum},
		{"checksum bit flip", flip(valid, checksumOffset+1), lim, ReasonChecksum},
		{"nan parameter", craftFrame(hdr(), nanPayload), lim, ReasonNonFinite},
		{"inf parameter", craftFrame(hdr(), infPayload), lim, ReasonNonFinite},
		{"nan progress", with(func(h *FrameHeader) { h.Progress = params.Progress(math.NaN()) }), lim, ReasonNonFinite},
		{"negative progress", with(func(h *FrameHeader) { h.Progress = -1 }), lim, ReasonProtocol},
		{"negative step", with(func(h *FrameHeader) { h.Step = -1 }), lim, ReasonProtocol},
		{"unknown dtype", with(func(h *FrameHeader) { h.DType = 9 }), lim, ReasonProtocol},
		{"zero elements", with(func(h *FrameHeader) { h.Elements = 0 }), Limits{}, ReasonProtocol},
		{"tiny chunks", with(func(h *FrameHeader) { h.ChunkSize = 16 }), lim, ReasonProtocol},
		{"odd chunks", with(func(h *FrameHeader) { h.ChunkSize = MinChunkSize + 1 }), lim, ReasonProtocol},
		{"reserved byte", func() []byte { b := bytes.Clone(valid); b[6] = 1; return b }(), lim, ReasonProtocol},
		{"reserved after checksum", func() []byte { b := bytes.Clone(valid); b[79] = 1; return b }(), lim, ReasonProtocol},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FrameReader{Limits: tc.lim}.ReadFrame(bytes.NewReader(tc.frame))
			if got := ReasonOf(err); got != tc.want {
				t.Errorf("reason %v (err %v), want %v", got, err, tc.want)
			}
		})
	}
	if _, err := (FrameReader{Limits: lim}).ReadFrame(bytes.NewReader(valid)); err != nil {
		t.Fatalf("the unmodified frame is refused: %v", err)
	}
}

// A checksum error must win over non-finite: a corrupted payload can look
// like anything.
func TestChecksumReportedBeforeNonFinite(t *testing.T) {
	h := FrameHeader{DType: FP32, Fingerprint: testFP, Elements: 2, ChunkSize: MinChunkSize}
	b := craftFrame(h, fp32Payload([]float32{1, 2}))
	copy(b[FrameHeaderSize:], fp32Payload([]float32{float32(math.NaN())}))
	if _, err := (FrameReader{}).ReadFrame(bytes.NewReader(b)); ReasonOf(err) != ReasonChecksum {
		t.Fatalf("got %v, want checksum", err)
	}
}

// The reader never allocates more than the limits allow: a header claiming
// 10 GB is refused before the payload is touched.
func TestReadFrameAllocatesWithinLimits(t *testing.T) {
	h := FrameHeader{DType: FP32, Fingerprint: testFP, Elements: 10 << 30 / 4, ChunkSize: MinChunkSize}
	hb := h.Marshal()
	allocs := testing.AllocsPerRun(10, func() {
		_, err := FrameReader{Limits: Limits{MaxElements: 1 << 20}}.ReadFrame(bytes.NewReader(hb[:]))
		if !errors.Is(err, ErrOversize) {
			t.Fatalf("got %v", err)
		}
	})
	// A few small allocations for the error; none of them 10 GB.
	if allocs > 10 {
		t.Errorf("%v allocations refusing an oversize header", allocs)
	}
}

type chunkRecorder struct{ sizes []int }

func (c *chunkRecorder) before(n int) error { c.sizes = append(c.sizes, n); return nil }

func TestChunking(t *testing.T) {
	s := testSnapshot(2500, 1) // 10000 bytes as fp32
	var w, r chunkRecorder
	b := encode(t, FrameWriter{ChunkSize: MinChunkSize, BeforeChunk: w.before}, s)
	if _, err := (FrameReader{BeforeChunk: r.before}).ReadFrame(bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	want := []int{FrameHeaderSize, 4096, 4096, 1808}
	for name, got := range map[string][]int{"writer": w.sizes, "reader": r.sizes} {
		if !equalInts(got, want) {
			t.Errorf("%s chunks %v, want %v", name, got, want)
		}
	}
	stop := errors.New("stop")
	n := 0
	_, err := FrameReader{BeforeChunk: func(int) error {
		if n++; n == 3 {
			return stop
		}
		return nil
	}}.ReadFrame(bytes.NewReader(b))
	if !errors.Is(err, stop) {
		t.Errorf("BeforeChunk error not returned: %v", err)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

type timeoutErr struct{}

func (timeoutErr) Error() string { return "i/o deadline reached" }
func (timeoutErr) Timeout() bool { return true }

type failingReader struct {
	data []byte
	err  error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if len(f.data) == 0 {
		return 0, f.err
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

func TestReadErrorsClassified(t *testing.T) {
	b := encode(t, FrameWriter{}, testSnapshot(10, 1))
	for _, tc := range []struct {
		err  error
		want Reason
	}{
		{timeoutErr{}, ReasonTimeout},
		{os.ErrDeadlineExceeded, ReasonTimeout},
		{io.ErrUnexpectedEOF, ReasonShortRead},
		{errors.New("connection reset"), ReasonNone},
	} {
		_, err := FrameReader{}.ReadFrame(&failingReader{data: b[:100], err: tc.err})
		if got := ReasonOf(err); got != tc.want {
			t.Errorf("read error %v: reason %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestLimitsCheck(t *testing.T) {
	h := FrameHeader{DType: FP32, Fingerprint: testFP, Elements: 100}
	other := testFP
	other[31]++
	for _, tc := range []struct {
		lim  Limits
		want error
	}{
		{Limits{}, nil},
		{Limits{Fingerprint: testFP, Elements: 100, MaxElements: 100}, nil},
		{Limits{Fingerprint: other}, ErrFingerprint},
		{Limits{MaxElements: 99}, ErrOversize},
		{Limits{Elements: 101}, ErrSizeMismatch},
		// Fingerprint is checked first: another model is refused as such
		// whatever its size.
		{Limits{Fingerprint: other, MaxElements: 1}, ErrFingerprint},
		// The sync protocol takes fp32 frames only.
		{Limits{DType: FP32}, nil},
		{Limits{DType: FP16}, ErrProtocol},
	} {
		if err := tc.lim.Check(h); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%+v: %v, want %v", tc.lim, err, tc.want)
		}
	}
}

func TestRequestResponseRoundTrip(t *testing.T) {
	q := Request{Kind: KindExchange, Fingerprint: testFP, Elements: 7}
	for _, dt := range []DType{0, FP32, FP16, INT8} {
		q.DType = dt
		b := q.Marshal()
		got, err := ParseRequest(b[:])
		if err != nil || got != q {
			t.Fatalf("request %+v, %v", got, err)
		}
	}
	for _, r := range []Response{{Status: StatusOK}, {Status: StatusBusy}, {Status: StatusUnavailable}, {Status: StatusRejected, Reason: ReasonChecksum}} {
		b := r.Marshal()
		got, err := ParseResponse(b[:])
		if err != nil || got != r {
			t.Errorf("response %+v: got %+v, %v", r, got, err)
		}
	}
	bad := func(b []byte, i int, v byte) []byte { b = bytes.Clone(b); b[i] = v; return b }
	qb := q.Marshal()
	for name, tc := range map[string]struct {
		b    []byte
		want Reason
	}{
		"short":        {qb[:10], ReasonShortRead},
		"magic":        {bad(qb[:], 0, 'X'), ReasonBadMagic},
		"version":      {bad(qb[:], 4, 9), ReasonBadVersion},
		"kind":         {bad(qb[:], 5, 7), ReasonProtocol},
		"reserved":     {bad(qb[:], 7, 1), ReasonProtocol},
		"dtype":        {bad(qb[:], 6, 9), ReasonProtocol},
		"kind zero":    {bad(qb[:], 5, 0), ReasonProtocol},
		"frame as req": {craftFrame(FrameHeader{}, nil)[:RequestSize], ReasonBadMagic},
	} {
		if _, err := ParseRequest(tc.b); ReasonOf(err) != tc.want {
			t.Errorf("request %s: %v, want %v", name, err, tc.want)
		}
	}
	rb := Response{Status: StatusOK}.Marshal()
	for name, tc := range map[string]struct {
		b    []byte
		want Reason
	}{
		"magic":            {bad(rb[:], 1, 'X'), ReasonBadMagic},
		"version":          {bad(rb[:], 4, 0), ReasonBadVersion},
		"status":           {bad(rb[:], 5, 4), ReasonProtocol},
		"reason without":   {bad(rb[:], 6, 3), ReasonProtocol},
		"reserved":         {bad(rb[:], 7, 1), ReasonProtocol},
		"short":            {rb[:7], ReasonShortRead},
		"rejected no code": {bad(rb[:], 5, byte(StatusRejected)), ReasonNone},
	} {
		if _, err := ParseResponse(tc.b); ReasonOf(err) != tc.want {
			t.Errorf("response %s: %v, want %v", name, err, tc.want)
		}
	}
}

func TestReasonOf(t *testing.T) {
	for _, r := range Reasons() {
		err := errors.Join(errors.New("context"), reasonErrs[r])
		if got := ReasonOf(err); got != r {
			t.Errorf("ReasonOf(%v) = %v, want %v", err, got, r)
		}
		if r.String() == "" || strings.Contains(r.String(), "(") {
			t.Errorf("reason %d has no name", r)
		}
	}
	for _, err := range []error{nil, ErrPeerBusy, ErrRefused, ErrUnavailable, ErrClosed, ErrHungUp, io.EOF} {
		if got := ReasonOf(err); got != ReasonNone {
			t.Errorf("ReasonOf(%v) = %v, want none", err, got)
		}
	}
	if len(Reasons()) != int(numReasons)-1 {
		t.Errorf("%d reasons listed", len(Reasons()))
	}
}

// Golden files pin the header bytes: a change here changes the wire.
func TestGoldenHeaders(t *testing.T) {
	fp := params.Fingerprint{}
	for i := range fp {
		fp[i] = byte(i)
	}
	frame := FrameHeader{DType: FP32, Fingerprint: fp, Elements: 101770, Step: 1234, Progress: 39488, ChunkSize: DefaultChunkSize,
		Age: 1500 * time.Millisecond, Checksum: 0x89abcdef}
	hb := frame.Marshal()
	qb := Request{Kind: KindExchange, Fingerprint: fp, Elements: 101770}.Marshal()
	rb := Response{Status: StatusRejected, Reason: ReasonNonFinite}.Marshal()
	full := craftFrame(FrameHeader{DType: FP16, Fingerprint: fp, Elements: 3, Step: 2, Progress: 64, ChunkSize: MinChunkSize}, []byte{0x00, 0x3c, 0x00, 0xc0, 0x55, 0x35})
	// The int8 frame as the encoder writes it: one block's scale 2/127,
	// then 64, -127, 21.
	var q8 bytes.Buffer
	if err := (FrameWriter{DType: INT8, ChunkSize: MinChunkSize}).WriteFrame(&q8,
		params.Snapshot{Fingerprint: fp, Step: 2, Progress: 64, Params: []float32{1, -2, 0.333}}); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"frame_header.golden": hb[:],
		"request.golden":      qb[:],
		"response.golden":     rb[:],
		"frame_fp16_3.golden": full,
		"frame_int8_3.golden": q8.Bytes(),
	} {
		path := filepath.Join("testdata", name)
		got := hex.Dump(b)
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update to create)", err)
		}
		if got != string(want) {
			t.Errorf("%s changed:\n%s\nwant:\n%s", name, got, want)
		}
	}
	if h, err := ParseFrameHeader(hb[:]); err != nil || h != frame {
		t.Fatalf("golden frame header parses to %+v, %v", h, err)
	}
	// The golden frame must decode to what it was built from.
	s, err := FrameReader{}.ReadFrame(bytes.NewReader(full))
	if err != nil || s.Params[0] != 1 || s.Params[1] != -2 || s.Step != 2 || s.Progress != 64 {
		t.Fatalf("golden fp16 frame decodes to %+v, %v", s, err)
	}
	scale := float32(2)
	scale /= 127
	s, err = FrameReader{}.ReadFrame(bytes.NewReader(q8.Bytes()))
	if err != nil || s.Params[0] != 64*scale || s.Params[1] != -127*scale || s.Params[2] != 21*scale {
		t.Fatalf("golden int8 frame decodes to %+v, %v", s, err)
	}
}

func TestReadFrameAlloc(t *testing.T) {
	s := testSnapshot(3000, 5)
	for _, dt := range []DType{FP32, FP16, INT8} {
		b := encode(t, FrameWriter{DType: dt, ChunkSize: MinChunkSize}, s)
		dirty := make([]float32, len(s.Params))
		for i := range dirty {
			dirty[i] = float32(math.NaN())
		}
		got, err := FrameReader{Alloc: func(n int) []float32 { return dirty }}.ReadFrame(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%v: %v", dt, err)
		}
		if &got.Params[0] != &dirty[0] {
			t.Fatalf("%v: the supplied vector was not used", dt)
		}
		if !params.AllFinite(got.Params) {
			t.Fatalf("%v: stale contents of the recycled vector survived", dt)
		}
		_, err = FrameReader{Alloc: func(n int) []float32 { return make([]float32, n-1) }}.ReadFrame(bytes.NewReader(b))
		if !errors.Is(err, ErrBadConfig) {
			t.Fatalf("%v: a short vector from Alloc: %v", dt, err)
		}
	}
}

// A frame carries its model's age in whole milliseconds, clamped to what
// the field holds; a version 1 header (no age) is refused as another
// version, not misread.
func TestFrameAge(t *testing.T) {
	for _, tc := range []struct{ in, want time.Duration }{
		{0, 0},
		{-time.Second, 0},
		{1500*time.Millisecond + 999*time.Microsecond, 1500 * time.Millisecond},
		{MaxWireAge, MaxWireAge},
		{MaxWireAge + time.Hour, MaxWireAge},
	} {
		s := testSnapshot(3, 1)
		s.Age = tc.in
		f, err := FrameWriter{}.Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := (FrameWriter{}).Send(&buf, f); err != nil {
			t.Fatal(err)
		}
		got, err := FrameReader{}.ReadFrame(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if got.Age != tc.want {
			t.Errorf("age %v arrives as %v, want %v", tc.in, got.Age, tc.want)
		}
	}
	hb := FrameHeader{DType: FP32, Elements: 1, ChunkSize: DefaultChunkSize}.Marshal()
	hb[4] = 1
	if _, err := ParseFrameHeader(hb[:]); !errors.Is(err, ErrBadVersion) {
		t.Errorf("version 1 frame header: %v, want ErrBadVersion", err)
	}
}

// TestReadFrameReusesItsChunkBuffer: reading a frame into a supplied
// vector allocates far less than the frame's payload: the buffer its
// chunks are read into is reused from one frame to the next (a pool,
// which the race detector empties at random now and then, hence the
// margin).
func TestReadFrameReusesItsChunkBuffer(t *testing.T) {
	s := testSnapshot(235146, 7)
	b := encode(t, FrameWriter{DType: FP16}, s)
	v := make([]float32, len(s.Params))
	rd := FrameReader{Alloc: func(int) []float32 { return v }}
	if _, err := rd.ReadFrame(bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	const reads = 200
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range reads {
		if _, err := rd.ReadFrame(bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	payload := uint64(2 * len(s.Params))
	if per := (after.TotalAlloc - before.TotalAlloc) / reads; per > payload/2 {
		t.Fatalf("%d bytes allocated per frame read, its payload is %d", per, payload)
	}
}
