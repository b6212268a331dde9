package train

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// IDX is the file format of MNIST (http://yann.lecun.com/exdb/mnist/): a
// 4-byte magic (two zero bytes, a data-type code, the number of dimensions),
// one big-endian uint32 per dimension, then the elements in row-major order.
// Only unsigned bytes (type 0x08) occur in MNIST and only they are read here.

// MaxIDXBytes is the default cap on the data section ReadIDX accepts: four
// times the MNIST training images, so a hostile header cannot make a reader
// reserve gigabytes.
const MaxIDXBytes = 200 << 20

const (
	idxTypeUbyte = 0x08
	idxMaxDims   = 8
	// idxChunk bounds the first allocation: buffers grow with the bytes
	// actually read, never straight to the size a header claims.
	idxChunk = 1 << 20
)

// IDX is a decoded IDX array of unsigned bytes.
type IDX struct {
	// Dims are the dimensions, outermost first (for MNIST images: count,
	// rows, columns).
	Dims []int
	// Data holds the product of Dims bytes, row-major.
	Data []byte
}

// ReadIDX decodes one IDX array of unsigned bytes from r, which may be plain
// or gzip-compressed (detected from its first bytes). maxBytes caps the data
// section (0 means MaxIDXBytes). It checks the magic number, the dimensions
// against the cap, that the data is complete, that nothing follows it and,
// for gzip input, the checksum. It never panics on bad input.
func ReadIDX(r io.Reader, maxBytes int64) (*IDX, error) {
	return readIDX(r, maxBytes, 0)
}

// readIDX is ReadIDX for a caller that knows the data size of a good file,
// expect (0: unknown). A header claiming exactly that much gets its buffer
// at once: growing one to MNIST's 47 MB of training images leaves 63 MB of
// garbage and peaks at 79 MB. A bad header gains nothing by it, as a good
// file needs that buffer anyway.
func readIDX(r io.Reader, maxBytes, expect int64) (*IDX, error) {
	if maxBytes <= 0 {
		maxBytes = MaxIDXBytes
	}
	br := bufio.NewReader(r)
	var src io.Reader = br
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: gzip header: %v", ErrBadIDX, err)
		}
		defer zr.Close()
		src = zr
	}

	dims, size, err := readIDXHeader(src, maxBytes)
	if err != nil {
		return nil, err
	}

	first := min(size, idxChunk)
	if size == expect {
		first = size
	}
	data := make([]byte, 0, first)
	for int64(len(data)) < size {
		if len(data) == cap(data) {
			grown := make([]byte, len(data), min(size, 2*int64(cap(data))))
			copy(grown, data)
			data = grown
		}
		n, err := src.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if err == io.EOF && int64(len(data)) < size {
			return nil, fmt.Errorf("%w: truncated: %d of %d data bytes", ErrBadIDX, len(data), size)
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("%w: data after %d of %d bytes: %v", ErrBadIDX, len(data), size, readErr(err))
		}
	}
	// Reading on to EOF also makes gzip verify its checksum.
	var extra [1]byte
	n, err := io.ReadFull(src, extra[:])
	if n > 0 {
		return nil, fmt.Errorf("%w: trailing bytes after %d data bytes", ErrBadIDX, size)
	}
	if err != io.EOF {
		return nil, fmt.Errorf("%w: after data: %v", ErrBadIDX, readErr(err))
	}
	return &IDX{Dims: dims, Data: data}, nil
}

// readIDXHeader reads the magic number and the dimensions from src and
// returns the dimensions and the data size they give, checked against
// maxBytes.
func readIDXHeader(src io.Reader, maxBytes int64) (dims []int, size int64, err error) {
	var head [4]byte
	if _, err := io.ReadFull(src, head[:]); err != nil {
		return nil, 0, fmt.Errorf("%w: magic number: %v", ErrBadIDX, readErr(err))
	}
	if head[0] != 0 || head[1] != 0 {
		return nil, 0, fmt.Errorf("%w: magic number %#08x does not start with two zero bytes", ErrBadIDX, binary.BigEndian.Uint32(head[:]))
	}
	if head[2] != idxTypeUbyte {
		return nil, 0, fmt.Errorf("%w: data type %#02x not supported (only unsigned byte, 0x08)", ErrBadIDX, head[2])
	}
	nd := int(head[3])
	if nd < 1 || nd > idxMaxDims {
		return nil, 0, fmt.Errorf("%w: %d dimensions (want 1 to %d)", ErrBadIDX, nd, idxMaxDims)
	}
	var db [4 * idxMaxDims]byte
	if _, err := io.ReadFull(src, db[:4*nd]); err != nil {
		return nil, 0, fmt.Errorf("%w: dimensions: %v", ErrBadIDX, readErr(err))
	}
	dims = make([]int, nd)
	size = 1
	for i := range dims {
		d := int64(binary.BigEndian.Uint32(db[4*i:]))
		if d == 0 {
			return nil, 0, fmt.Errorf("%w: dimension %d is zero", ErrBadIDX, i)
		}
		if d > maxBytes || size > maxBytes/d {
			return nil, 0, fmt.Errorf("%w: dimensions %v exceed the cap of %d bytes", ErrBadIDX, claimedDims(db[:4*nd]), maxBytes)
		}
		size *= d
		dims[i] = int(d)
	}
	return dims, size, nil
}

func readErr(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

func claimedDims(b []byte) []uint32 {
	out := make([]uint32, len(b)/4)
	for i := range out {
		out[i] = binary.BigEndian.Uint32(b[4*i:])
	}
	return out
}

// WriteIDX writes a plain (uncompressed) IDX array of unsigned bytes. It
// exists for tests and for tools that produce datasets ReadIDX accepts.
func WriteIDX(w io.Writer, dims []int, data []byte) error {
	if len(dims) < 1 || len(dims) > idxMaxDims {
		return fmt.Errorf("%w: %d dimensions (want 1 to %d)", ErrBadIDX, len(dims), idxMaxDims)
	}
	size := 1
	buf := []byte{0, 0, idxTypeUbyte, byte(len(dims))}
	for _, d := range dims {
		if d <= 0 || d > 1<<31-1 || size > (1<<31-1)/d {
			return fmt.Errorf("%w: dimensions %v", ErrBadIDX, dims)
		}
		size *= d
		buf = binary.BigEndian.AppendUint32(buf, uint32(d))
	}
	if len(data) != size {
		return fmt.Errorf("%w: %d data bytes for dimensions %v (want %d)", ErrBadIDX, len(data), dims, size)
	}
	if _, err := w.Write(buf); err != nil {
		return err
	}
	_, err := w.Write(data)
	return err
}
