package reputation

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		name string
		edit func(*Params)
		want []string // one substring per error expected, in any order
	}{
		{"defaults", func(*Params) {}, nil},
		{"clipped may be 0 and accepted 0", func(p *Params) { p.Weights[Clipped], p.Weights[Accepted] = 0, 0 }, nil},
		{"negative credit", func(p *Params) { p.Weights[Accepted] = -1 }, []string{"Weights[accepted] = -1"}},
		{"positive penalty", func(p *Params) { p.Weights[Outlier] = 3 }, []string{"Weights[outlier] = 3"}},
		{"positive clipped", func(p *Params) { p.Weights[Clipped] = 0.1 }, []string{"Weights[clipped]"}},
		{"NaN weight", func(p *Params) { p.Weights[Timeout] = nan }, []string{"Weights[timeout] = NaN"}},
		{"infinite credit", func(p *Params) { p.Weights[Accepted] = inf }, []string{"Weights[accepted] = +Inf"}},
		{"infinite penalty", func(p *Params) { p.Weights[NonFinite] = -inf }, []string{"Weights[non_finite] = -Inf"}},
		{"zero max score", func(p *Params) { p.MaxScore = 0 }, []string{"MaxScore = 0"}},
		{"NaN max score", func(p *Params) { p.MaxScore = nan }, []string{"MaxScore = NaN"}},
		{"infinite max score", func(p *Params) { p.MaxScore = inf }, []string{"MaxScore = +Inf"}},
		{"zero half life", func(p *Params) { p.HalfLife = 0 }, []string{"HalfLife = 0s"}},
		{"negative half life", func(p *Params) { p.HalfLife = -1 }, []string{"HalfLife = -1ns"}},
		{"ignore at 0", func(p *Params) { p.IgnoreBelow = 0 }, []string{"IgnoreBelow = 0: must be < 0"}},
		{"ignore NaN", func(p *Params) { p.IgnoreBelow = nan },
			// DisconnectBelow can no longer be compared with it either.
			[]string{"IgnoreBelow = NaN", "DisconnectBelow = -20: must be < IgnoreBelow (NaN)"}},
		{"ban -Inf", func(p *Params) { p.BanBelow = -inf }, []string{"BanBelow = -Inf: must be finite"}},
		{"disconnect equals ignore", func(p *Params) { p.DisconnectBelow = p.IgnoreBelow },
			[]string{"DisconnectBelow = -10: must be < IgnoreBelow (-10)"}},
		{"ban above disconnect", func(p *Params) { p.BanBelow = -15 },
			[]string{"BanBelow = -15: must be < DisconnectBelow (-20)"}},
		{"zero ban", func(p *Params) { p.BanFor = 0 }, []string{"BanFor = 0s"}},
		{"no peers", func(p *Params) { p.MaxPeers = 0 }, []string{"MaxPeers = 0"}},
		{"several at once", func(p *Params) {
			p.Weights[Rejected] = 1
			p.MaxScore = -1
			p.BanBelow = 5
			p.MaxPeers = -3
		}, []string{"Weights[rejected] = 1", "MaxScore = -1", "BanBelow = 5", "MaxPeers = -3"}},
		{"zero value", func(p *Params) { *p = Params{} }, []string{
			"MaxScore", "HalfLife", "IgnoreBelow", "DisconnectBelow", "BanBelow", "BanFor", "MaxPeers",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultParams()
			tt.edit(&p)
			err := p.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrBadParams) {
				t.Fatalf("Validate() = %v, want ErrBadParams", err)
			}
			var errs []error
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				errs = j.Unwrap()
			}
			if len(errs) != len(tt.want) {
				t.Errorf("Validate() reported %d errors, want %d:\n%v", len(errs), len(tt.want), err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %v\nmissing %q", err, w)
				}
			}
			if b, err2 := New(p); b != nil || err2 == nil {
				t.Errorf("New accepted params Validate refuses")
			}
		})
	}
}

func TestNames(t *testing.T) {
	want := []string{"accepted", "clipped", "rejected", "fingerprint_mismatch", "non_finite",
		"outlier", "loss_jump", "timeout", "protocol_violation"}
	if len(want) != int(NumVerdicts) {
		t.Fatalf("%d names for %d verdicts", len(want), NumVerdicts)
	}
	for v, w := range want {
		if got := Verdict(v).String(); got != w {
			t.Errorf("Verdict(%d) = %q, want %q", v, got, w)
		}
	}
	if got := NumVerdicts.String(); got != "verdict(9)" {
		t.Errorf("NumVerdicts.String() = %q", got)
	}
	for s, w := range []string{"ok", "ignored", "disconnected", "banned", "state(4)"} {
		if got := State(s).String(); got != w {
			t.Errorf("State(%d) = %q, want %q", s, got, w)
		}
	}
}
