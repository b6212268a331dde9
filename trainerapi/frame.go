package trainerapi

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"unsafe"
)

// Version is the protocol version hello negotiates.
const Version = 1

// Frame limits: a header is a small JSON object; a payload is at most the
// registered model and optimizer (the server passes the bound).
const (
	magic         = "MTT1"
	prefixLen     = 16
	MaxHeaderSize = 1 << 20
)

// ErrFrame is wrapped by every malformed-frame error: after one the
// stream cannot be trusted and the connection is closed.
var ErrFrame = errors.New("trainerapi: malformed frame")

// Ops are the ops this node serves, in the order a session uses them; the
// hello reply lists them ("ops"), so a trainer can tell a node that lacks
// one (an older node, which lists none) before it asks. Ops added to the
// protocol after version 1 (average) are only sent to a node that lists
// them.
var Ops = []string{"hello", "register", "pull", "push", "average", "eval", "bye"}

// ErrUnsupported is returned, without a request, for an op the node did
// not list in its hello reply (an older node).
var ErrUnsupported = errors.New("trainerapi: the node does not serve this op")

// Error codes of a refused request (docs/protocol.md).
const (
	CodeBadRequest    = "bad_request"
	CodeBadVersion    = "bad_version"
	CodeUnauthorized  = "unauthorized"
	CodeNotRegistered = "not_registered"
	CodeBusy          = "busy"
	CodeMismatch      = "mismatch"
	CodeBadShape      = "bad_shape"
	CodeNonFinite     = "non_finite"
)

// apiError is a refusal: its code and a sentence for the trainer.
type apiError struct {
	Code, Msg string
}

func (e *apiError) Error() string { return e.Code + ": " + e.Msg }

func refusal(code, format string, a ...any) *apiError {
	return &apiError{Code: code, Msg: fmt.Sprintf(format, a...)}
}

// frameHeader reads a frame's prefix and header, checking both against
// the limits; the payload (its length returned) is still on r.
func readHeader(r io.Reader, maxPayload uint64, hdr any) (payload uint64, err error) {
	var pre [prefixLen]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return 0, err
	}
	if string(pre[:4]) != magic {
		return 0, fmt.Errorf("%w: magic %q, want %q", ErrFrame, pre[:4], magic)
	}
	h := binary.LittleEndian.Uint32(pre[4:8])
	payload = binary.LittleEndian.Uint64(pre[8:16])
	if h < 2 || h > MaxHeaderSize {
		return 0, fmt.Errorf("%w: header of %d bytes (2 to %d)", ErrFrame, h, MaxHeaderSize)
	}
	if payload > maxPayload || payload%4 != 0 {
		return 0, fmt.Errorf("%w: payload of %d bytes (a multiple of 4, at most %d)", ErrFrame, payload, maxPayload)
	}
	buf := make([]byte, h)
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, unexpected(err)
	}
	if err := json.Unmarshal(buf, hdr); err != nil {
		return 0, fmt.Errorf("%w: header is not a JSON object: %v", ErrFrame, err)
	}
	return payload, nil
}

// readFloats reads n float32 values (little-endian) into dst[:n].
func readFloats(r io.Reader, dst []float32) error {
	if len(dst) == 0 {
		return nil
	}
	if nativeLE {
		b := unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*len(dst))
		_, err := io.ReadFull(r, b)
		return unexpected(err)
	}
	buf := make([]byte, 1<<16)
	for i := 0; i < len(dst); {
		k := min(len(buf)/4, len(dst)-i)
		if _, err := io.ReadFull(r, buf[:4*k]); err != nil {
			return unexpected(err)
		}
		for j := range k {
			dst[i+j] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*j:]))
		}
		i += k
	}
	return nil
}

// writeFrame writes a frame whose payload is the vectors end to end.
func writeFrame(w io.Writer, hdr any, vecs ...[]float32) error {
	h, err := json.Marshal(hdr)
	if err != nil {
		return err
	}
	n := 0
	for _, v := range vecs {
		n += len(v)
	}
	var pre [prefixLen]byte
	copy(pre[:4], magic)
	binary.LittleEndian.PutUint32(pre[4:8], uint32(len(h)))
	binary.LittleEndian.PutUint64(pre[8:16], uint64(4*n))
	if _, err := w.Write(append(pre[:], h...)); err != nil {
		return err
	}
	for _, v := range vecs {
		if err := writeFloats(w, v); err != nil {
			return err
		}
	}
	return nil
}

func writeFloats(w io.Writer, v []float32) error {
	if len(v) == 0 {
		return nil
	}
	if nativeLE {
		_, err := w.Write(unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)))
		return err
	}
	buf := make([]byte, 1<<16)
	for i := 0; i < len(v); {
		k := min(len(buf)/4, len(v)-i)
		for j := range k {
			binary.LittleEndian.PutUint32(buf[4*j:], math.Float32bits(v[i+j]))
		}
		if _, err := w.Write(buf[:4*k]); err != nil {
			return err
		}
		i += k
	}
	return nil
}

// discard skips n payload bytes of a refused request.
func discard(r io.Reader, n uint64) error {
	_, err := io.CopyN(io.Discard, r, int64(n))
	return unexpected(err)
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

var nativeLE = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()
