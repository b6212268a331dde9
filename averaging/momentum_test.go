package averaging

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
	"testing"
)

func TestParseMomentumPolicy(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want MomentumPolicy
	}{{"keep", MomentumKeep}, {"reset", MomentumReset}, {"mix", MomentumMix}} {
		got, err := ParseMomentumPolicy(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseMomentumPolicy(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if got.String() != tc.in {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tc.in)
		}
	}
	for _, bad := range []string{"", "Keep", "mix ", "average", "0"} {
		if _, err := ParseMomentumPolicy(bad); !errors.Is(err, ErrBadMomentumPolicy) {
			t.Errorf("ParseMomentumPolicy(%q): err = %v, want ErrBadMomentumPolicy", bad, err)
		}
	}
	if s := MomentumPolicy(9).String(); s != "MomentumPolicy(9)" {
		t.Errorf("invalid policy String() = %q", s)
	}
}

func TestMomentumPolicyText(t *testing.T) {
	var cfg struct {
		Momentum MomentumPolicy `json:"momentum"`
	}
	if err := json.Unmarshal([]byte(`{"momentum":"reset"}`), &cfg); err != nil || cfg.Momentum != MomentumReset {
		t.Fatalf("unmarshal: %v, %v", cfg.Momentum, err)
	}
	b, err := json.Marshal(cfg)
	if err != nil || string(b) != `{"momentum":"reset"}` {
		t.Fatalf("marshal: %s, %v", b, err)
	}
	if err := json.Unmarshal([]byte(`{"momentum":"nesterov"}`), &cfg); !errors.Is(err, ErrBadMomentumPolicy) {
		t.Errorf("unmarshal of an unknown policy: %v", err)
	}
	cfg.Momentum = 42
	if _, err := json.Marshal(cfg); !errors.Is(err, ErrBadMomentumPolicy) {
		t.Errorf("marshal of an invalid policy: %v", err)
	}
}

func TestMomentumApply(t *testing.T) {
	m0 := []float32{4, -8, 2, 0, 1}
	remote := []float32{0, 8, 2, 4, -1}
	tests := []struct {
		name    string
		p       MomentumPolicy
		remote  []float32
		a       float64
		want    []float32
		wantErr error
	}{
		{"keep", MomentumKeep, remote, 0.5, m0, nil},
		{"keep ignores missing remote", MomentumKeep, nil, 0.5, m0, nil},
		{"reset", MomentumReset, nil, 0.25, []float32{0, 0, 0, 0, 0}, nil},
		{"reset with nothing merged", MomentumReset, nil, 0, m0, nil},
		{"mix with remote", MomentumMix, remote, 0.5, []float32{2, 0, 2, 2, 0}, nil},
		{"mix with remote quarter", MomentumMix, remote, 0.25, []float32{3, -4, 2, 1, 0.5}, nil},
		{"mix without remote scales", MomentumMix, nil, 0.25, []float32{3, -6, 1.5, 0, 0.75}, nil},
		{"mix weight one without remote", MomentumMix, nil, 1, []float32{0, 0, 0, 0, 0}, nil},
		{"mix with nothing merged", MomentumMix, nil, 0, m0, nil},
		{"bad weight", MomentumMix, nil, 1.5, m0, ErrBadWeight},
		{"NaN weight", MomentumReset, nil, math.NaN(), m0, ErrBadWeight},
		{"remote length", MomentumMix, remote[:2], 0.5, m0, ErrLength},
		{"remote length under keep", MomentumKeep, remote[:2], 0.5, m0, ErrLength},
		{"invalid policy", MomentumPolicy(3), nil, 0.5, m0, ErrBadMomentumPolicy},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := slices.Clone(m0)
			r := slices.Clone(tc.remote)
			err := tc.p.Apply(m, r, tc.a)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if !slices.Equal(m, tc.want) {
				t.Errorf("m = %v, want %v", m, tc.want)
			}
			if !slices.Equal(r, tc.remote) {
				t.Errorf("remote momentum was written: %v", r)
			}
		})
	}
}
