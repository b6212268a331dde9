package train

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"testing"
)

func idxBytes(t testing.TB, dims []int, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteIDX(&b, dims, data); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func TestReadIDXRoundTrip(t *testing.T) {
	data := make([]byte, 3*4*5)
	for i := range data {
		data[i] = byte(i * 7)
	}
	plain := idxBytes(t, []int{3, 4, 5}, data)
	for name, in := range map[string][]byte{"plain": plain, "gzip": gz(t, plain)} {
		t.Run(name, func(t *testing.T) {
			got, err := ReadIDX(bytes.NewReader(in), 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Dims) != 3 || got.Dims[0] != 3 || got.Dims[1] != 4 || got.Dims[2] != 5 {
				t.Fatalf("dims %v", got.Dims)
			}
			if !bytes.Equal(got.Data, data) {
				t.Fatal("data differs")
			}
		})
	}
}

func TestReadIDXRejects(t *testing.T) {
	good := idxBytes(t, []int{2, 3}, []byte{1, 2, 3, 4, 5, 6})
	hdr := func(b0, b1, typ, nd byte, dims ...uint32) []byte {
		b := []byte{b0, b1, typ, nd}
		for _, d := range dims {
			b = binary.BigEndian.AppendUint32(b, d)
		}
		return b
	}
	corruptGz := gz(t, good)
	corruptGz[len(corruptGz)-6] ^= 0xff // inside the CRC-32 trailer
	cases := []struct {
		name, want string
		in         []byte
	}{
		{"empty", "magic", nil},
		{"short magic", "magic", []byte{0, 0}},
		{"nonzero magic", "two zero bytes", hdr(1, 0, 8, 1, 1)},
		{"float type", "not supported", hdr(0, 0, 0x0d, 1, 1)},
		{"zero dims", "dimensions", hdr(0, 0, 8, 0)},
		{"too many dims", "dimensions", hdr(0, 0, 8, 9)},
		{"short dims", "dimensions", hdr(0, 0, 8, 2, 5)},
		{"zero dim", "is zero", hdr(0, 0, 8, 2, 5, 0)},
		{"over cap", "exceed the cap", hdr(0, 0, 8, 3, 60000, 60000, 60000)},
		{"truncated data", "truncated", good[:len(good)-1]},
		{"trailing", "trailing", append(good[:len(good):len(good)], 9)},
		{"bad gzip", "gzip", []byte{0x1f, 0x8b, 0, 0}},
		{"truncated gzip", "", gz(t, good)[:20]},
		{"gzip checksum", "", corruptGz},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ReadIDX(bytes.NewReader(c.in), 0)
			if err == nil {
				t.Fatalf("accepted: %+v", got)
			}
			if !errors.Is(err, ErrBadIDX) {
				t.Fatalf("error %v does not wrap ErrBadIDX", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not mention %q", err, c.want)
			}
		})
	}
}

// A header claiming 100 MB in front of a few bytes must not make the reader
// reserve 100 MB.
func TestReadIDXAllocatesWhatItReads(t *testing.T) {
	in := []byte{0, 0, 8, 1}
	in = binary.BigEndian.AppendUint32(in, 100<<20)
	in = append(in, make([]byte, 10)...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ReadIDX(bytes.NewReader(in), 0)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrBadIDX) || !strings.Contains(err.Error(), "truncated: 10 of") {
		t.Fatalf("error %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
		t.Fatalf("allocated %d bytes for a 14-byte input", got)
	}
}

// A file of the size its reader expects is read into one buffer of that
// size; a header claiming any other size still gets a buffer that grows
// with the bytes read.
func TestReadIDXExpectedSize(t *testing.T) {
	const size = 8 << 20
	good := idxBytes(t, []int{size / 16, 16}, make([]byte, size))
	alloc := func(in []byte, expect int64) (uint64, error) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := readIDX(bytes.NewReader(in), 0, expect)
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc, err
	}
	grown, err := alloc(good, 0)
	if err != nil {
		t.Fatal(err)
	}
	once, err := alloc(good, size)
	if err != nil {
		t.Fatal(err)
	}
	if once >= size+size/8 || grown < once+size/2 {
		t.Fatalf("%d bytes allocated for %d bytes of data expected, %d when not", once, size, grown)
	}
	hostile := binary.BigEndian.AppendUint32([]byte{0, 0, 8, 1}, 100<<20)
	hostile = append(hostile, make([]byte, 10)...)
	got, err := alloc(hostile, size)
	if !errors.Is(err, ErrBadIDX) || got > 8<<20 {
		t.Fatalf("a 14-byte input claiming 100 MB, 8 MB expected: %d bytes allocated, %v", got, err)
	}
}

func TestReadIDXCapArgument(t *testing.T) {
	in := idxBytes(t, []int{10, 10}, make([]byte, 100))
	if _, err := ReadIDX(bytes.NewReader(in), 99); !errors.Is(err, ErrBadIDX) {
		t.Fatalf("100 bytes under a cap of 99: %v", err)
	}
	if _, err := ReadIDX(bytes.NewReader(in), 100); err != nil {
		t.Fatalf("100 bytes under a cap of 100: %v", err)
	}
}

func TestWriteIDXRejects(t *testing.T) {
	var b bytes.Buffer
	for _, c := range []struct {
		dims []int
		n    int
	}{{nil, 0}, {[]int{0}, 0}, {[]int{-1}, 0}, {[]int{2, 2}, 3}, {make([]int, 9), 0}} {
		if err := WriteIDX(&b, c.dims, make([]byte, c.n)); !errors.Is(err, ErrBadIDX) {
			t.Errorf("dims %v with %d bytes: %v", c.dims, c.n, err)
		}
	}
}

func FuzzIDX(f *testing.F) {
	plain := idxBytes(f, []int{2, 2, 3}, []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 255})
	f.Add(plain)
	f.Add(gz(f, plain))
	f.Add(idxBytes(f, []int{5}, []byte{0, 1, 2, 3, 9}))
	f.Add(plain[:7])
	f.Add(append(plain[:len(plain):len(plain)], 0))
	f.Add([]byte{0, 0, 8, 3, 0, 0, 0xea, 0x60, 0, 0, 0, 28, 0, 0, 0, 28})
	f.Add([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		const limit = 1 << 20
		got, err := ReadIDX(bytes.NewReader(in), limit)
		if err != nil {
			if !errors.Is(err, ErrBadIDX) {
				t.Fatalf("error %v does not wrap ErrBadIDX", err)
			}
			return
		}
		n := 1
		for _, d := range got.Dims {
			if d <= 0 {
				t.Fatalf("dims %v", got.Dims)
			}
			n *= d
		}
		if n != len(got.Data) || n > limit {
			t.Fatalf("dims %v with %d data bytes", got.Dims, len(got.Data))
		}
		// What was accepted must survive a round trip.
		var b bytes.Buffer
		if err := WriteIDX(&b, got.Dims, got.Data); err != nil {
			t.Fatal(err)
		}
		again, err := ReadIDX(&b, limit)
		if err != nil || !bytes.Equal(again.Data, got.Data) {
			t.Fatalf("round trip: %v", err)
		}
	})
}
