package params

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
)

// safetensors format: an 8-byte little-endian header length N, N bytes of
// JSON mapping tensor names to {dtype, shape, data_offsets} plus an optional
// "__metadata__" string map, then the raw little-endian tensor bytes. PyTorch
// (safetensors.torch.load_file) and NumPy (safetensors.numpy) read it without
// meshtrain.

// MaxSafetensorsHeader bounds the JSON header a reader will accept.
const MaxSafetensorsHeader = 16 << 20

// ErrBadSafetensors is wrapped by every safetensors decoding error.
var ErrBadSafetensors = errors.New("params: bad safetensors file")

type stEntry struct {
	DType       string   `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// WriteSafetensors writes v, laid out by l, with string metadata.
func WriteSafetensors(w io.Writer, l Layout, v []float32, meta map[string]string) error {
	if err := l.Check(v); err != nil {
		return err
	}
	header := make(map[string]any, len(l.tensors)+1)
	for _, t := range l.tensors {
		header[t.Name] = stEntry{DType: "F32", Shape: t.Shape,
			DataOffsets: [2]int64{int64(t.Offset) * 4, int64(t.Offset+t.Len()) * 4}}
	}
	if len(meta) > 0 {
		header["__metadata__"] = meta
	}
	hb, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("params: encode safetensors header: %w", err)
	}
	// Pad with spaces so the data starts 8-byte aligned, as the reference
	// implementation does.
	for (8+len(hb))%8 != 0 {
		hb = append(hb, ' ')
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(hb)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	if _, err := w.Write(hb); err != nil {
		return err
	}
	buf := make([]byte, 0, 64<<10)
	for _, x := range v {
		buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(x))
		if len(buf) == cap(buf) {
			if _, err := w.Write(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
	}
	if len(buf) > 0 {
		_, err = w.Write(buf)
	}
	return err
}

// ReadSafetensors reads a file written by WriteSafetensors or any F32
// safetensors file whose tensors tile the data section. Tensors are ordered by
// offset. maxElements bounds the total (0 means MaxElements).
func ReadSafetensors(r io.Reader, maxElements int) (Layout, []float32, map[string]string, error) {
	if maxElements <= 0 || maxElements > MaxElements {
		maxElements = MaxElements
	}
	bad := func(format string, a ...any) (Layout, []float32, map[string]string, error) {
		return Layout{}, nil, nil, fmt.Errorf("%w: "+format, append([]any{ErrBadSafetensors}, a...)...)
	}
	var n [8]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return bad("header length: %v", err)
	}
	hl := binary.LittleEndian.Uint64(n[:])
	if hl == 0 || hl > MaxSafetensorsHeader {
		return bad("header length %d out of range", hl)
	}
	hb := make([]byte, hl)
	if _, err := io.ReadFull(r, hb); err != nil {
		return bad("header: %v", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hb, &raw); err != nil {
		return bad("header JSON: %v", err)
	}
	var meta map[string]string
	type named struct {
		name string
		e    stEntry
	}
	var entries []named
	for k, m := range raw {
		if k == "__metadata__" {
			if err := json.Unmarshal(m, &meta); err != nil {
				return bad("metadata: %v", err)
			}
			continue
		}
		var e stEntry
		if err := json.Unmarshal(m, &e); err != nil {
			return bad("tensor %q: %v", k, err)
		}
		if e.DType != "F32" {
			return bad("tensor %q has dtype %s; only F32 is supported", k, e.DType)
		}
		entries = append(entries, named{k, e})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].e.DataOffsets[0] < entries[j].e.DataOffsets[0] })
	specs := make([]TensorSpec, len(entries))
	for i, e := range entries {
		specs[i] = TensorSpec{Name: e.name, Shape: e.e.Shape}
	}
	l, err := NewLayout(specs...)
	if err != nil {
		return bad("%v", err)
	}
	if l.size > maxElements {
		return bad("%d elements exceed the limit of %d", l.size, maxElements)
	}
	for i, t := range l.tensors {
		off := entries[i].e.DataOffsets
		if off[0] != int64(t.Offset)*4 || off[1] != int64(t.Offset+t.Len())*4 {
			return bad("tensor %q data_offsets %v do not tile the data", t.Name, off)
		}
	}
	v := make([]float32, l.size)
	buf := make([]byte, 64<<10)
	for i := 0; i < len(v); {
		chunk := min(len(buf)/4, len(v)-i)
		if _, err := io.ReadFull(r, buf[:chunk*4]); err != nil {
			return bad("data: %v", err)
		}
		for j := range chunk {
			v[i+j] = math.Float32frombits(binary.LittleEndian.Uint32(buf[j*4:]))
		}
		i += chunk
	}
	return l, v, meta, nil
}
