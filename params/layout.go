package params

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// MaxElements bounds the size of a layout: 1<<30 float32s is 4 GiB, far
// beyond any model this system trains, and small enough that every offset
// fits an int on 32-bit platforms.
const MaxElements = 1 << 30

var (
	// ErrBadLayout is wrapped by every layout validation error.
	ErrBadLayout = errors.New("params: bad layout")
	// ErrSizeMismatch is returned when a vector does not match its layout.
	ErrSizeMismatch = errors.New("params: vector size does not match layout")
)

var tensorName = regexp.MustCompile(`^[A-Za-z0-9_.\-]{1,128}$`)

// TensorSpec names one tensor and its shape (row-major, outermost first).
type TensorSpec struct {
	Name  string `json:"name"`
	Shape []int  `json:"shape"`
}

// Tensor is a TensorSpec placed in the flat vector.
type Tensor struct {
	TensorSpec
	// Offset is the index of the tensor's first element in the flat vector.
	Offset int `json:"offset"`
}

// Len is the number of elements in the tensor.
func (t Tensor) Len() int { return numel(t.Shape) }

// Slice returns the tensor's elements within v (no copy).
func (t Tensor) Slice(v []float32) []float32 { return v[t.Offset : t.Offset+t.Len()] }

// Layout is an ordered list of tensors laid end to end in one flat vector.
// It is immutable once built; copy it freely.
type Layout struct {
	tensors []Tensor
	size    int
}

// NewLayout validates specs (unique names, positive dimensions, a bounded
// total) and places them in order.
func NewLayout(specs ...TensorSpec) (Layout, error) {
	if len(specs) == 0 {
		return Layout{}, fmt.Errorf("%w: no tensors", ErrBadLayout)
	}
	seen := make(map[string]bool, len(specs))
	ts := make([]Tensor, 0, len(specs))
	off := 0
	for _, s := range specs {
		if !tensorName.MatchString(s.Name) {
			return Layout{}, fmt.Errorf("%w: tensor name %q", ErrBadLayout, s.Name)
		}
		if seen[s.Name] {
			return Layout{}, fmt.Errorf("%w: duplicate tensor %q", ErrBadLayout, s.Name)
		}
		seen[s.Name] = true
		if len(s.Shape) == 0 || len(s.Shape) > 8 {
			return Layout{}, fmt.Errorf("%w: tensor %q has %d dimensions", ErrBadLayout, s.Name, len(s.Shape))
		}
		n := 1
		for _, d := range s.Shape {
			if d <= 0 || d > MaxElements || n > MaxElements/d {
				return Layout{}, fmt.Errorf("%w: tensor %q shape %v", ErrBadLayout, s.Name, s.Shape)
			}
			n *= d
		}
		if off > MaxElements-n {
			return Layout{}, fmt.Errorf("%w: more than %d elements", ErrBadLayout, MaxElements)
		}
		ts = append(ts, Tensor{TensorSpec: TensorSpec{Name: s.Name, Shape: append([]int(nil), s.Shape...)}, Offset: off})
		off += n
	}
	return Layout{tensors: ts, size: off}, nil
}

// MustLayout is NewLayout for specs known valid at compile time.
func MustLayout(specs ...TensorSpec) Layout {
	l, err := NewLayout(specs...)
	if err != nil {
		panic(err)
	}
	return l
}

// Size is the number of float32 elements in the flat vector.
func (l Layout) Size() int { return l.size }

// Tensors returns a copy of the tensors in order.
func (l Layout) Tensors() []Tensor {
	out := make([]Tensor, len(l.tensors))
	copy(out, l.tensors)
	return out
}

// Lookup finds a tensor by name.
func (l Layout) Lookup(name string) (Tensor, bool) {
	for _, t := range l.tensors {
		if t.Name == name {
			return t, true
		}
	}
	return Tensor{}, false
}

// Check reports whether v has exactly the layout's size.
func (l Layout) Check(v []float32) error {
	if len(v) != l.size {
		return fmt.Errorf("%w: got %d, want %d", ErrSizeMismatch, len(v), l.size)
	}
	return nil
}

// Equal reports whether two layouts name the same tensors with the same shapes
// in the same order.
func (l Layout) Equal(o Layout) bool { return l.String() == o.String() }

// String is the canonical text form, e.g. "fc1.weight[128,784];fc1.bias[128]".
// The fingerprint hashes it, so it must never change for a given layout.
func (l Layout) String() string {
	var b strings.Builder
	for i, t := range l.tensors {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(t.Name)
		b.WriteByte('[')
		for j, d := range t.Shape {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprint(&b, d)
		}
		b.WriteByte(']')
	}
	return b.String()
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}
