package params

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func mlpLayout(t testing.TB) Layout {
	t.Helper()
	l, err := NewLayout(
		TensorSpec{Name: "fc1.weight", Shape: []int{3, 4}},
		TensorSpec{Name: "fc1.bias", Shape: []int{3}},
		TensorSpec{Name: "fc2.weight", Shape: []int{2, 3}},
		TensorSpec{Name: "fc2.bias", Shape: []int{2}},
	)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLayoutPlacesTensorsEndToEnd(t *testing.T) {
	l := mlpLayout(t)
	if l.Size() != 12+3+6+2 {
		t.Fatalf("size %d", l.Size())
	}
	want := []int{0, 12, 15, 21}
	for i, tn := range l.Tensors() {
		if tn.Offset != want[i] {
			t.Errorf("%s offset %d, want %d", tn.Name, tn.Offset, want[i])
		}
	}
	b, ok := l.Lookup("fc2.weight")
	if !ok || b.Len() != 6 || b.Offset != 15 {
		t.Fatalf("lookup fc2.weight: %+v %v", b, ok)
	}
	if _, ok := l.Lookup("nope"); ok {
		t.Fatal("lookup of a missing tensor succeeded")
	}
	v := make([]float32, l.Size())
	b.Slice(v)[0] = 7
	if v[15] != 7 {
		t.Fatal("Slice does not alias the vector")
	}
	if got := l.String(); got != "fc1.weight[3,4];fc1.bias[3];fc2.weight[2,3];fc2.bias[2]" {
		t.Fatalf("canonical form %q", got)
	}
	if err := l.Check(v); err != nil {
		t.Fatal(err)
	}
	if err := l.Check(v[1:]); !errors.Is(err, ErrSizeMismatch) {
		t.Fatalf("Check of a short vector: %v", err)
	}
	// Tensors returns a copy: mutating it must not change the layout.
	ts := l.Tensors()
	ts[0].Offset = 99
	if l.Tensors()[0].Offset != 0 {
		t.Fatal("Tensors exposes internal state")
	}
}

func TestLayoutRejectsBadSpecs(t *testing.T) {
	cases := map[string][]TensorSpec{
		"empty":     nil,
		"dup":       {{Name: "a", Shape: []int{1}}, {Name: "a", Shape: []int{2}}},
		"zero dim":  {{Name: "a", Shape: []int{0}}},
		"neg dim":   {{Name: "a", Shape: []int{-1}}},
		"no shape":  {{Name: "a"}},
		"bad name":  {{Name: "a b", Shape: []int{1}}},
		"no name":   {{Name: "", Shape: []int{1}}},
		"too big":   {{Name: "a", Shape: []int{1 << 20, 1 << 20}}},
		"overflow":  {{Name: "a", Shape: []int{math.MaxInt / 2, 4}}},
		"sum large": {{Name: "a", Shape: []int{MaxElements}}, {Name: "b", Shape: []int{1}}},
	}
	for name, specs := range cases {
		if _, err := NewLayout(specs...); !errors.Is(err, ErrBadLayout) {
			t.Errorf("%s: got %v, want ErrBadLayout", name, err)
		}
	}
}

func TestFingerprintSeparatesInputs(t *testing.T) {
	l := mlpLayout(t)
	base := NewFingerprint(l, "mnist", "main")
	if base != NewFingerprint(l, "mnist", "main") {
		t.Fatal("fingerprint is not deterministic")
	}
	other := MustLayout(TensorSpec{Name: "fc1.weight", Shape: []int{4, 3}}, TensorSpec{Name: "fc1.bias", Shape: []int{3}},
		TensorSpec{Name: "fc2.weight", Shape: []int{2, 3}}, TensorSpec{Name: "fc2.bias", Shape: []int{2}})
	for name, fp := range map[string]Fingerprint{
		"shape":   NewFingerprint(other, "mnist", "main"),
		"dataset": NewFingerprint(l, "synthetic", "main"),
		"network": NewFingerprint(l, "mnist", "test"),
		// Length prefixes stop "ab"+"c" from colliding with "a"+"bc".
		"concat": NewFingerprint(l, "mnistm", "ain"),
	} {
		if fp == base {
			t.Errorf("changing the %s does not change the fingerprint", name)
		}
	}
	parsed, err := ParseFingerprint(base.String())
	if err != nil || parsed != base {
		t.Fatalf("parse round trip: %v", err)
	}
	if _, err := ParseFingerprint("abc"); err == nil {
		t.Fatal("short fingerprint accepted")
	}
	if len(base.Short()) != 12 || !strings.HasPrefix(base.String(), base.Short()) {
		t.Fatal("Short is not a prefix")
	}
	var z Fingerprint
	if !z.IsZero() || base.IsZero() {
		t.Fatal("IsZero")
	}
}

// The fingerprint recipe is part of the wire protocol: peers running
// different releases must agree. This pins it.
func TestFingerprintGolden(t *testing.T) {
	got := NewFingerprint(mlpLayout(t), "mnist", "main").String()
	golden := filepath.Join("testdata", "fingerprint.golden")
	if os.Getenv("UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(golden, []byte(got+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != strings.TrimSpace(string(want)) {
		t.Fatalf("fingerprint recipe changed: got %s, want %s", got, want)
	}
}

func TestProgress(t *testing.T) {
	p := Progress(100).Step(64)
	if p != 164 {
		t.Fatalf("step: %v", p)
	}
	if m := Progress(100).Mix(200, 0.25); m != 125 {
		t.Fatalf("mix: %v", m)
	}
	// A fast model mixing in an older one loses progress: that is intended.
	if m := Progress(1000).Mix(200, 0.5); m != 600 {
		t.Fatalf("mix down: %v", m)
	}
	for _, bad := range []float64{math.NaN(), math.Inf(1), -1} {
		if Progress(bad).Valid() {
			t.Errorf("%v reported valid", bad)
		}
	}
	if !Progress(0).Valid() {
		t.Error("0 invalid")
	}
}

func TestSnapshotCloneIsDeep(t *testing.T) {
	s := Snapshot{Step: 3, Params: []float32{1, 2}}
	c := s.Clone()
	c.Params[0] = 9
	if s.Params[0] != 1 || c.Step != 3 {
		t.Fatal("clone shares params")
	}
}

func TestSafetensorsRoundTrip(t *testing.T) {
	l := mlpLayout(t)
	v := make([]float32, l.Size())
	for i := range v {
		v[i] = float32(i)*0.5 - 3
	}
	var buf bytes.Buffer
	meta := map[string]string{"model": "mlp:3", "step": "7"}
	if err := WriteSafetensors(&buf, l, v, meta); err != nil {
		t.Fatal(err)
	}
	hl := binary.LittleEndian.Uint64(buf.Bytes()[:8])
	if (8+hl)%8 != 0 {
		t.Fatalf("data section not 8-byte aligned: header %d", hl)
	}
	l2, v2, meta2, err := ReadSafetensors(bytes.NewReader(buf.Bytes()), 0)
	if err != nil {
		t.Fatal(err)
	}
	if !l2.Equal(l) {
		t.Fatalf("layout %s != %s", l2, l)
	}
	for i := range v {
		if v[i] != v2[i] {
			t.Fatalf("element %d: %v != %v", i, v2[i], v[i])
		}
	}
	if meta2["model"] != "mlp:3" || meta2["step"] != "7" {
		t.Fatalf("metadata %v", meta2)
	}
	if err := WriteSafetensors(&buf, l, v[:3], nil); !errors.Is(err, ErrSizeMismatch) {
		t.Fatalf("short vector written: %v", err)
	}
}

// testdata/tiny.safetensors pins the exact bytes the writer produces (header
// JSON, 8-byte alignment, F32 little-endian) so a change of encoding is seen.
func TestSafetensorsGolden(t *testing.T) {
	l := MustLayout(TensorSpec{Name: "w", Shape: []int{2, 2}}, TensorSpec{Name: "b", Shape: []int{2}})
	v := []float32{1, 2, 3, 4, -1, 0.5}
	var buf bytes.Buffer
	if err := WriteSafetensors(&buf, l, v, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "tiny.safetensors")
	if os.Getenv("UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("safetensors encoding changed:\n got %q\nwant %q", buf.Bytes(), want)
	}
}

func TestSafetensorsRejectsHostileInput(t *testing.T) {
	l := MustLayout(TensorSpec{Name: "w", Shape: []int{2, 2}})
	var good bytes.Buffer
	if err := WriteSafetensors(&good, l, []float32{1, 2, 3, 4}, nil); err != nil {
		t.Fatal(err)
	}
	header := func(js string) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
		return append(b, js...)
	}
	cases := map[string][]byte{
		"empty":          nil,
		"short length":   {1, 2, 3},
		"huge header":    binary.LittleEndian.AppendUint64(nil, 1<<40),
		"zero header":    binary.LittleEndian.AppendUint64(nil, 0),
		"truncated json": header(`{"w":`),
		"bad dtype":      header(`{"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}`),
		"gap":            header(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`),
		"wrong end":      header(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}}`),
		"neg shape":      header(`{"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,0]}}`),
		"bad metadata":   header(`{"__metadata__":{"a":1},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`),
		"no tensors":     header(`{}`),
		"truncated data": good.Bytes()[:good.Len()-3],
	}
	for name, in := range cases {
		if _, _, _, err := ReadSafetensors(bytes.NewReader(in), 0); !errors.Is(err, ErrBadSafetensors) {
			t.Errorf("%s: got %v, want ErrBadSafetensors", name, err)
		}
	}
	if _, _, _, err := ReadSafetensors(bytes.NewReader(good.Bytes()), 3); !errors.Is(err, ErrBadSafetensors) {
		t.Errorf("element limit not enforced: %v", err)
	}
}

func FuzzReadSafetensors(f *testing.F) {
	var good bytes.Buffer
	_ = WriteSafetensors(&good, MustLayout(TensorSpec{Name: "w", Shape: []int{2, 2}}), []float32{1, 2, 3, 4}, map[string]string{"k": "v"})
	f.Add(good.Bytes())
	f.Add([]byte{8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '})
	f.Fuzz(func(t *testing.T, in []byte) {
		l, v, _, err := ReadSafetensors(bytes.NewReader(in), 1<<20)
		if err != nil {
			return
		}
		if l.Check(v) != nil {
			t.Fatalf("accepted a vector that does not match its layout")
		}
		var out bytes.Buffer
		if err := WriteSafetensors(&out, l, v, nil); err != nil {
			t.Fatalf("re-encoding an accepted file: %v", err)
		}
	})
}
