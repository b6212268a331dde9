package train

import (
	"errors"
	"testing"
)

// FuzzSpecs feeds arbitrary strings to the parsers of the settings a config
// file, a flag or an environment variable gives as text: --model, --shard
// and --schedule. None may panic or build something huge; each refusal
// wraps its package error; and each accepted value prints in a form that
// parses back to the same value (the form status output and checkpoint
// metadata show).
func FuzzSpecs(f *testing.F) {
	for _, s := range [][3]string{
		{"softmax", "all", "const"},
		{"mlp:128,64", "0/4", "cosine"},
		{"mlp:0128", "3/4", "cosine:warmup=3200,total=180000"},
		{"mlp:65536,65536,65536", "4/4", "cosine:warmup=4%"},
		{"mlp:1,2,3,4,5,6,7,8,9", "1/0", "cosine:warmup=7%,total=1e5"},
		{"mlp:", "-1/2", "cosine:total=5,warmup=5"},
		{"mlp", "0/+2", "const:warmup=1,warmup=2"},
		{"mlp:1e3", " 0/1", "cosine:warmup=100%"},
		{"", "", ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, model, shard, schedule string) {
		if m, err := ParseModel(model, 784, 10); err != nil {
			if !errors.Is(err, ErrBadModel) || m != nil {
				t.Fatalf("ParseModel(%q) = %v, %v", model, m, err)
			}
		} else {
			again, err := ParseModel(m.Spec(), 784, 10)
			if err != nil || again.Spec() != m.Spec() || !again.Layout().Equal(m.Layout()) {
				t.Fatalf("model %q prints as %q, which parses as %v, %v", model, m.Spec(), again, err)
			}
			back, err := ModelFromLayout(m.Spec(), m.Layout())
			if err != nil || !back.Layout().Equal(m.Layout()) {
				t.Fatalf("model %q does not rebuild from its own layout: %v", model, err)
			}
		}
		if sh, err := ParseShard(shard); err != nil {
			if !errors.Is(err, ErrBadShard) {
				t.Fatalf("ParseShard(%q): %v", shard, err)
			}
		} else if again, err := ParseShard(sh.String()); err != nil || again != sh || sh.Validate() != nil {
			t.Fatalf("shard %q prints as %q, which parses as %v, %v", shard, sh, again, err)
		}
		if sc, err := ParseSchedule(schedule); err != nil {
			if !errors.Is(err, ErrBadSchedule) {
				t.Fatalf("ParseSchedule(%q): %v", schedule, err)
			}
		} else if again, err := ParseSchedule(sc.String()); err != nil || again != sc || sc.Validate() != nil {
			t.Fatalf("schedule %q prints as %q, which parses as %+v, %v", schedule, sc, again, err)
		}
	})
}
