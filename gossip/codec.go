package gossip

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"sync"
	"time"
	"unsafe"

	"github.com/meshtrain/meshtrain/params"
)

// The wire codec: pure functions over io.Reader and io.Writer, no libp2p.
// Layouts are specified byte for byte in docs/protocol.md; every multi-byte
// integer is little-endian, the byte order of the float32 payload itself,
// so on little-endian machines the payload moves with no conversion.

// Wire sizes and limits.
const (
	// WireVersion is the version byte of the request and response headers
	// (both protocols).
	WireVersion = 1
	// FrameVersion is the version byte of a parameter frame header.
	// Version 2 added the model's age.
	FrameVersion = 2
	// FrameHeaderSize is the fixed size of a parameter frame header.
	FrameHeaderSize = 80
	// RequestSize is the fixed size of the request header.
	RequestSize = 48
	// ResponseSize is the fixed size of the response header.
	ResponseSize = 8

	// DefaultChunkSize is the payload unit a sender writes and a receiver
	// reads under one deadline.
	DefaultChunkSize = 1 << 20
	// MinChunkSize and MaxChunkSize bound the header's chunk size: tiny
	// chunks make a peer pay a syscall and a deadline per few bytes; huge
	// ones stretch the per-chunk deadline into a long free stall.
	MinChunkSize = 4 << 10
	MaxChunkSize = 16 << 20

	// checksumOffset is where the checksum sits in the frame header.
	checksumOffset = 72

	// hashBlock is the number of elements checksummed and checked for
	// finiteness per step of the sender's one pass: small enough to stay in
	// cache between the two.
	hashBlock = 64 << 10
)

var (
	frameMagic    = [4]byte{'M', 'T', 'P', 'F'}
	requestMagic  = [4]byte{'M', 'T', 'R', 'Q'}
	responseMagic = [4]byte{'M', 'T', 'R', 'S'}
)

// castagnoli is the CRC-32C table; crc32 uses the CPU's instruction for it
// where there is one.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// littleEndian is true on the machines we run on; there the float32 slice
// is already the wire payload and is sent and received in place.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// zeroCopy selects the in-place fp32 path. A variable so the portable path
// (used on big-endian machines) is tested too.
var zeroCopy = littleEndian

// DType is the element type of a frame's payload.
type DType uint8

// Element types (numDTypes bounds them, for tables indexed by dtype).
const (
	FP32 DType = 1 // IEEE 754 binary32, 4 bytes, exact
	FP16 DType = 2 // IEEE 754 binary16, 2 bytes, rounded to nearest even
	// INT8: a byte per element and a float32 scale per Int8Block
	// elements, blockwise absmax quantization (int8.go).
	INT8 DType = 3

	numDTypes = 4
)

// Size is the number of payload bytes per element (0 if unknown); int8
// payloads carry a scale per Int8Block elements on top (PayloadSize).
func (d DType) Size() int {
	switch d {
	case FP32:
		return 4
	case FP16:
		return 2
	case INT8:
		return 1
	}
	return 0
}

func (d DType) String() string {
	switch d {
	case FP32:
		return "fp32"
	case FP16:
		return "fp16"
	case INT8:
		return "int8"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Reduced is what the all-reduce (sync and diloco rounds) sends for a node
// that sends its models as d: the same, but fp16 for int8. The all-reduce
// has no int8: its partial sums would be rounded again at every hop, and
// DDP's compression hooks stop at fp16 too.
func (d DType) Reduced() DType {
	if d == INT8 {
		return FP16
	}
	return d
}

// ParseDType reads "fp32", "fp16" or "int8" (a flag value).
func ParseDType(s string) (DType, error) {
	switch s {
	case "fp32":
		return FP32, nil
	case "fp16":
		return FP16, nil
	case "int8":
		return INT8, nil
	}
	return 0, fmt.Errorf("%w: dtype %q (want fp32, fp16 or int8)", ErrBadConfig, s)
}

// FrameHeader describes one parameter frame: a frozen snapshot's metadata
// and how its payload follows.
type FrameHeader struct {
	DType       DType
	Fingerprint params.Fingerprint
	// Elements is the number of parameters; the payload is
	// Elements*DType.Size() bytes, plus the scales of an int8 payload.
	Elements uint64
	Step     int64
	Progress params.Progress
	// ChunkSize is the sender's write unit in bytes; the receiver reads and
	// renews its deadline in the same unit.
	ChunkSize uint32
	// Age is params.Snapshot.Age when the snapshot was encoded, carried in
	// whole milliseconds (up to MaxWireAge; older ages are sent as
	// MaxWireAge, which every staleness rule treats as very stale).
	Age time.Duration
	// Checksum is CRC-32C (Castagnoli) of the payload bytes as sent. The
	// transport already authenticates every byte against tampering, and a
	// hostile sender can compute any hash of any garbage, so what is left
	// to catch is our own encoder, decoder or memory going wrong: a CRC
	// does that (every burst error up to 32 bits, anything else but one
	// in 2^32) and, hardware-accelerated in the standard library, runs at
	// about 20 GB/s here, against 8 GB/s for xxHash64 and 1 GB/s for
	// SHA-256, which both ends of every transfer would pay per byte.
	Checksum uint32
}

// PayloadSize is the number of payload bytes that follow the header.
func (h FrameHeader) PayloadSize() uint64 {
	if h.DType == INT8 {
		return int8PayloadSize(h.Elements)
	}
	return h.Elements * uint64(h.DType.Size())
}

// Marshal encodes the header as it goes on the wire.
func (h FrameHeader) Marshal() [FrameHeaderSize]byte {
	var b [FrameHeaderSize]byte
	copy(b[0:4], frameMagic[:])
	b[4] = FrameVersion
	b[5] = byte(h.DType)
	// b[6:8] reserved, zero.
	copy(b[8:40], h.Fingerprint[:])
	binary.LittleEndian.PutUint64(b[40:48], h.Elements)
	binary.LittleEndian.PutUint64(b[48:56], uint64(h.Step))
	binary.LittleEndian.PutUint64(b[56:64], math.Float64bits(float64(h.Progress)))
	binary.LittleEndian.PutUint32(b[64:68], h.ChunkSize)
	binary.LittleEndian.PutUint32(b[68:72], wireAge(h.Age))
	binary.LittleEndian.PutUint32(b[72:76], h.Checksum)
	// b[76:80] reserved, zero.
	return b
}

// ParseFrameHeader decodes and checks a header on its own terms (magic,
// version, known dtype, reserved bytes zero, sane chunk size, step and
// progress); Limits.Check then checks it against what the receiver expects.
func ParseFrameHeader(b []byte) (FrameHeader, error) {
	if len(b) < FrameHeaderSize {
		return FrameHeader{}, fmt.Errorf("%w: frame header of %d bytes", ErrShortRead, len(b))
	}
	if [4]byte(b[0:4]) != frameMagic {
		return FrameHeader{}, fmt.Errorf("%w: frame header starts %q", ErrBadMagic, b[0:4])
	}
	if b[4] != FrameVersion {
		return FrameHeader{}, fmt.Errorf("%w: frame version %d", ErrBadVersion, b[4])
	}
	h := FrameHeader{
		DType:     DType(b[5]),
		Elements:  binary.LittleEndian.Uint64(b[40:48]),
		Step:      int64(binary.LittleEndian.Uint64(b[48:56])),
		Progress:  params.Progress(math.Float64frombits(binary.LittleEndian.Uint64(b[56:64]))),
		ChunkSize: binary.LittleEndian.Uint32(b[64:68]),
		Age:       time.Duration(binary.LittleEndian.Uint32(b[68:72])) * time.Millisecond,
		Checksum:  binary.LittleEndian.Uint32(b[72:76]),
	}
	copy(h.Fingerprint[:], b[8:40])
	switch {
	case h.DType.Size() == 0:
		return h, fmt.Errorf("%w: unknown dtype %d", ErrProtocol, b[5])
	case b[6] != 0 || b[7] != 0 || binary.LittleEndian.Uint32(b[76:80]) != 0:
		return h, fmt.Errorf("%w: reserved header bytes set", ErrProtocol)
	case !validChunkSize(int64(h.ChunkSize)):
		return h, fmt.Errorf("%w: chunk size %d", ErrProtocol, h.ChunkSize)
	case h.Elements == 0:
		return h, fmt.Errorf("%w: empty frame", ErrProtocol)
	case h.Step < 0:
		return h, fmt.Errorf("%w: negative step %d", ErrProtocol, h.Step)
	case math.IsNaN(float64(h.Progress)) || math.IsInf(float64(h.Progress), 0):
		return h, fmt.Errorf("%w: progress %v", ErrNonFinite, float64(h.Progress))
	case h.Progress < 0:
		return h, fmt.Errorf("%w: negative progress %v", ErrProtocol, float64(h.Progress))
	}
	return h, nil
}

// MaxWireAge is the largest age a frame carries: about 49.7 days.
const MaxWireAge = time.Duration(math.MaxUint32) * time.Millisecond

// wireAge is d in whole milliseconds, clamped to [0, MaxWireAge].
func wireAge(d time.Duration) uint32 {
	switch {
	case d <= 0:
		return 0
	case d >= MaxWireAge:
		return math.MaxUint32
	}
	return uint32(d / time.Millisecond)
}

func validChunkSize(n int64) bool {
	return n >= MinChunkSize && n <= MaxChunkSize && n%4 == 0
}

// Limits is what a receiver expects of a frame before it reads the payload.
type Limits struct {
	// Fingerprint every frame must carry; the zero value accepts any (only
	// tests and tools should leave it unset).
	Fingerprint params.Fingerprint
	// Elements is the exact element count expected; 0 means unknown.
	Elements int
	// MaxElements is a hard cap; 0 or above params.MaxElements means
	// params.MaxElements.
	MaxElements int
	// DType, if set, is the only payload type accepted (a protocol error
	// otherwise).
	DType DType
}

// Check reports the first way h falls outside l: another model
// (fingerprint), too big (oversize), or not the expected size.
func (l Limits) Check(h FrameHeader) error {
	if l.DType != 0 && h.DType != l.DType {
		return fmt.Errorf("%w: a %v frame where only %v is taken", ErrProtocol, h.DType, l.DType)
	}
	if !l.Fingerprint.IsZero() && h.Fingerprint != l.Fingerprint {
		return fmt.Errorf("%w: frame carries %s, want %s", ErrFingerprint, h.Fingerprint.Short(), l.Fingerprint.Short())
	}
	maxN := uint64(params.MaxElements)
	if l.MaxElements > 0 && uint64(l.MaxElements) < maxN {
		maxN = uint64(l.MaxElements)
	}
	if h.Elements > maxN {
		return fmt.Errorf("%w: frame claims %d elements, limit %d", ErrOversize, h.Elements, maxN)
	}
	if l.Elements > 0 && h.Elements != uint64(l.Elements) {
		return fmt.Errorf("%w: frame has %d elements, want %d", ErrSizeMismatch, h.Elements, l.Elements)
	}
	return nil
}

// FrameWriter encodes snapshots. The zero value writes fp32 in
// DefaultChunkSize chunks.
type FrameWriter struct {
	// DType is the payload type to send, FP32 if zero. FP16 falls back to
	// FP32 for a snapshot holding a finite value beyond ±MaxFP16, because
	// the receiver would see Inf and reject the frame; INT8 does for one
	// beyond ±1e38.
	DType DType
	// ChunkSize in bytes, DefaultChunkSize if zero; see MinChunkSize.
	ChunkSize int
	// BeforeChunk, if set, runs before each write of n bytes (the header is
	// one write, then one per chunk): the stream shell renews its write
	// deadline there. An error aborts the frame.
	BeforeChunk func(n int) error
}

// Frame is a snapshot ready to send: checked, converted and checksummed
// once. For fp32 its payload is the snapshot's own memory (never written);
// the sender may send it any number of times while the snapshot lives.
type Frame struct {
	Header  FrameHeader
	payload []byte
}

// Size is the number of bytes the frame takes on the wire.
func (f *Frame) Size() int64 { return FrameHeaderSize + int64(len(f.payload)) }

// Encode checks s and prepares its frame. It refuses an empty or invalid
// snapshot, and one holding NaN or Inf: a diverged model is stopped here
// rather than counted against us as "non_finite" by every peer it reaches.
func (e FrameWriter) Encode(s params.Snapshot) (*Frame, error) {
	dt := e.DType
	if dt == 0 {
		dt = FP32
	}
	chunk := e.ChunkSize
	if chunk == 0 {
		chunk = DefaultChunkSize
	}
	switch {
	case dt.Size() == 0:
		return nil, fmt.Errorf("%w: dtype %d", ErrBadConfig, dt)
	case !validChunkSize(int64(chunk)):
		return nil, fmt.Errorf("%w: chunk size %d", ErrBadConfig, chunk)
	case len(s.Params) == 0 || len(s.Params) > params.MaxElements:
		return nil, fmt.Errorf("%w: %d parameters", ErrBadSnapshot, len(s.Params))
	case s.Step < 0 || !s.Progress.Valid():
		return nil, fmt.Errorf("%w: step %d progress %v", ErrBadSnapshot, s.Step, float64(s.Progress))
	}
	var payload []byte
	switch dt {
	case FP16:
		payload = make([]byte, 2*len(s.Params))
		if encodeFP16(payload, s.Params) {
			dt, payload = FP32, nil
		}
	case INT8:
		payload = make([]byte, int8PayloadSize(uint64(len(s.Params))))
		if encodeInt8(payload, s.Params) {
			dt, payload = FP32, nil
		}
	}
	if dt == FP32 {
		if zeroCopy {
			payload = float32Bytes(s.Params)
		} else {
			payload = make([]byte, 4*len(s.Params))
			for i, f := range s.Params {
				binary.LittleEndian.PutUint32(payload[4*i:], math.Float32bits(f))
			}
		}
	}
	// One pass over the parameters, block by block while each is in
	// cache: check finiteness and checksum the payload (an int8 payload,
	// whose scales come first, is checksummed whole).
	var crc uint32
	es := dt.Size()
	for off := 0; off < len(s.Params); off += hashBlock {
		end := min(off+hashBlock, len(s.Params))
		if !params.AllFinite(s.Params[off:end]) {
			return nil, fmt.Errorf("%w: %w", ErrBadSnapshot, params.ErrNonFinite)
		}
		if dt != INT8 {
			crc = crc32.Update(crc, castagnoli, payload[off*es:end*es])
		}
	}
	if dt == INT8 {
		crc = crc32.Checksum(payload, castagnoli)
	}
	return &Frame{
		Header: FrameHeader{
			DType:       dt,
			Fingerprint: s.Fingerprint,
			Elements:    uint64(len(s.Params)),
			Step:        s.Step,
			Progress:    s.Progress,
			ChunkSize:   uint32(chunk),
			Age:         s.Age,
			Checksum:    crc,
		},
		payload: payload,
	}, nil
}

// Send writes f: the header, then the payload in the header's chunk size.
func (e FrameWriter) Send(w io.Writer, f *Frame) error {
	hb := f.Header.Marshal()
	if err := e.write(w, hb[:]); err != nil {
		return fmt.Errorf("write frame header: %w", err)
	}
	chunk := int(f.Header.ChunkSize)
	for off := 0; off < len(f.payload); off += chunk {
		end := min(off+chunk, len(f.payload))
		if err := e.write(w, f.payload[off:end]); err != nil {
			return fmt.Errorf("write frame payload at byte %d: %w", off, err)
		}
	}
	return nil
}

// WriteFrame encodes and sends s as one frame.
func (e FrameWriter) WriteFrame(w io.Writer, s params.Snapshot) error {
	f, err := e.Encode(s)
	if err != nil {
		return err
	}
	return e.Send(w, f)
}

func (e FrameWriter) write(w io.Writer, b []byte) error {
	if e.BeforeChunk != nil {
		if err := e.BeforeChunk(len(b)); err != nil {
			return err
		}
	}
	_, err := w.Write(b)
	return err
}

// FrameReader decodes frames under Limits.
type FrameReader struct {
	Limits Limits
	// Alloc, if set, supplies the parameter vector of each frame read, so a
	// caller can recycle vectors instead of faulting in fresh memory for
	// every transfer. It must return a slice of length n that nothing else
	// uses; every element is overwritten. nil means make.
	Alloc func(n int) []float32
	// BeforeChunk, if set, runs before each read of n bytes (the header,
	// then each chunk): the stream shell renews its read deadline there.
	BeforeChunk func(n int) error
}

// ReadFrame reads one frame and returns it as a snapshot whose Params are
// freshly allocated, or supplied by Alloc. It refuses, before allocating,
// any header outside the limits; verifies the checksum; and only then
// refuses NaN or Inf, so a corrupted payload is reported as "checksum"
// rather than whatever the corruption happens to look like.
func (d FrameReader) ReadFrame(r io.Reader) (params.Snapshot, error) {
	var hb [FrameHeaderSize]byte
	if err := d.read(r, hb[:]); err != nil {
		return params.Snapshot{}, fmt.Errorf("read frame header: %w", err)
	}
	h, err := ParseFrameHeader(hb[:])
	if err != nil {
		return params.Snapshot{}, err
	}
	if err := d.Limits.Check(h); err != nil {
		return params.Snapshot{}, err
	}
	var out []float32
	if d.Alloc != nil {
		if out = d.Alloc(int(h.Elements)); len(out) != int(h.Elements) {
			return params.Snapshot{}, fmt.Errorf("%w: Alloc returned %d elements, want %d", ErrBadConfig, len(out), h.Elements)
		}
	} else {
		out = make([]float32, h.Elements)
	}
	var crc uint32
	chunk := int(h.ChunkSize)
	finite := true
	size := int(h.PayloadSize())
	var buf []byte
	if h.DType != FP32 || !zeroCopy {
		buf = chunkBuf(min(chunk, size))
		defer chunkBufs.Put(&buf)
	}
	var q8 *int8Decoder
	if h.DType == INT8 {
		q8 = newInt8Decoder(h.Elements)
	}
	for off := 0; off < size; off += chunk {
		end := min(off+chunk, size)
		var p []byte
		if h.DType == FP32 && zeroCopy {
			p = float32Bytes(out)[off:end]
		} else {
			p = buf[:end-off]
		}
		if err := d.read(r, p); err != nil {
			return params.Snapshot{}, fmt.Errorf("read frame payload at byte %d of %d: %w", off, size, err)
		}
		crc = crc32.Update(crc, castagnoli, p)
		// Chunk sizes are multiples of 4, so element (and int8 scale)
		// boundaries align.
		var dst []float32
		switch h.DType {
		case FP32:
			dst = out[off/4 : end/4]
			if !zeroCopy {
				for i := range dst {
					dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(p[4*i:]))
				}
			}
		case FP16:
			// Checked as it is decoded.
			dst = out[off/2 : end/2]
			finite = decodeFP16(dst, p) && finite
			continue
		case INT8:
			dst = q8.decode(out, p)
		}
		// Checked while the chunk is still in cache; reported after the
		// checksum.
		finite = finite && params.AllFinite(dst)
	}
	if crc != h.Checksum {
		return params.Snapshot{}, fmt.Errorf("%w: payload sums to %08x, header says %08x", ErrChecksum, crc, h.Checksum)
	}
	if !finite {
		return params.Snapshot{}, fmt.Errorf("%w: %w", ErrNonFinite, params.ErrNonFinite)
	}
	return params.Snapshot{Fingerprint: h.Fingerprint, Step: h.Step, Progress: h.Progress, Age: h.Age, Params: out}, nil
}

// chunkBufs holds the buffers ReadFrame reads a frame's chunks into
// before decoding them (*[]byte): a chunk is up to 1 MiB, and a fresh one
// for every frame is memory to zero and collect at every exchange.
var chunkBufs sync.Pool

// chunkBuf returns a buffer of n bytes from chunkBufs, or a fresh one.
func chunkBuf(n int) []byte {
	if b, ok := chunkBufs.Get().(*[]byte); ok && cap(*b) >= n {
		return (*b)[:n]
	}
	return make([]byte, n)
}

func (d FrameReader) read(r io.Reader, p []byte) error {
	if d.BeforeChunk != nil {
		if err := d.BeforeChunk(len(p)); err != nil {
			return err
		}
	}
	_, err := io.ReadFull(r, p)
	return readError(err)
}

// readError classifies a read failure: the peer stopped early (short
// read) or stalled (timeout); anything else is passed through with its
// own context.
func readError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: %w", ErrShortRead, err)
	case isTimeout(err):
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return err
}

// float32Bytes views v's memory as bytes (native order) without copying.
func float32Bytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
}

// RequestKind says what the initiator of a stream wants.
type RequestKind uint8

// Request kinds.
const (
	// KindPull asks for the responder's snapshot; the initiator sends none.
	KindPull RequestKind = 1
	// KindExchange: the initiator sends its snapshot, then receives the
	// responder's.
	KindExchange RequestKind = 2
)

func (k RequestKind) String() string {
	switch k {
	case KindPull:
		return "pull"
	case KindExchange:
		return "exchange"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Request is the first thing the initiator writes on a stream.
type Request struct {
	Kind RequestKind
	// Fingerprint of the model the initiator trains; the responder refuses
	// a mismatch before any payload moves.
	Fingerprint params.Fingerprint
	// Elements the initiator expects (and, for an exchange, sends); 0 if
	// unknown.
	Elements uint64
	// DType is the precision the initiator asks the responder's frame in,
	// the one it sends its own in (0: the responder's choice).
	DType DType
}

// Marshal encodes the request as it goes on the wire.
func (q Request) Marshal() [RequestSize]byte {
	var b [RequestSize]byte
	copy(b[0:4], requestMagic[:])
	b[4] = WireVersion
	b[5] = byte(q.Kind)
	b[6] = byte(q.DType)
	copy(b[8:40], q.Fingerprint[:])
	binary.LittleEndian.PutUint64(b[40:48], q.Elements)
	return b
}

// ParseRequest decodes a request header.
func ParseRequest(b []byte) (Request, error) {
	if len(b) < RequestSize {
		return Request{}, fmt.Errorf("%w: request of %d bytes", ErrShortRead, len(b))
	}
	if [4]byte(b[0:4]) != requestMagic {
		return Request{}, fmt.Errorf("%w: request starts %q", ErrBadMagic, b[0:4])
	}
	if b[4] != WireVersion {
		return Request{}, fmt.Errorf("%w: request version %d", ErrBadVersion, b[4])
	}
	q := Request{Kind: RequestKind(b[5]), DType: DType(b[6]), Elements: binary.LittleEndian.Uint64(b[40:48])}
	copy(q.Fingerprint[:], b[8:40])
	if q.Kind != KindPull && q.Kind != KindExchange {
		return q, fmt.Errorf("%w: request kind %d", ErrProtocol, b[5])
	}
	if q.DType != 0 && q.DType.Size() == 0 {
		return q, fmt.Errorf("%w: request for dtype %d", ErrProtocol, b[6])
	}
	if b[7] != 0 {
		return q, fmt.Errorf("%w: reserved request bytes set", ErrProtocol)
	}
	return q, nil
}

// Status is the responder's answer to a request (and, in an exchange, to
// the initiator's frame).
type Status uint8

// Statuses.
const (
	StatusOK          Status = 0 // a frame follows (or, first answer to an exchange: send yours)
	StatusBusy        Status = 1 // at capacity; try another peer or later
	StatusUnavailable Status = 2 // no snapshot to serve yet
	StatusRejected    Status = 3 // refused; Response.Reason says why
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusBusy:
		return "busy"
	case StatusUnavailable:
		return "unavailable"
	case StatusRejected:
		return "rejected"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Response is the responder's fixed-size answer.
type Response struct {
	Status Status
	// Reason is set with StatusRejected.
	Reason Reason
}

// Marshal encodes the response as it goes on the wire.
func (p Response) Marshal() [ResponseSize]byte {
	var b [ResponseSize]byte
	copy(b[0:4], responseMagic[:])
	b[4] = WireVersion
	b[5] = byte(p.Status)
	b[6] = byte(p.Reason)
	return b
}

// ParseResponse decodes a response header.
func ParseResponse(b []byte) (Response, error) {
	if len(b) < ResponseSize {
		return Response{}, fmt.Errorf("%w: response of %d bytes", ErrShortRead, len(b))
	}
	if [4]byte(b[0:4]) != responseMagic {
		return Response{}, fmt.Errorf("%w: response starts %q", ErrBadMagic, b[0:4])
	}
	if b[4] != WireVersion {
		return Response{}, fmt.Errorf("%w: response version %d", ErrBadVersion, b[4])
	}
	p := Response{Status: Status(b[5]), Reason: Reason(b[6])}
	if p.Status > StatusRejected || b[7] != 0 || (p.Status != StatusRejected && p.Reason != ReasonNone) {
		return p, fmt.Errorf("%w: response status %d reason %d", ErrProtocol, b[5], b[6])
	}
	return p, nil
}
