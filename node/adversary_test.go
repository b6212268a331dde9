//go:build testhooks

package node

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/train"
)

func TestParseAdversary(t *testing.T) {
	for _, tc := range []struct {
		kind, strength string
		want           Adversary
		err            string // a piece of the error; "" for none
	}{
		{"", "", Adversary{}, ""},
		{"", "3", Adversary{}, "without --adversary"},
		{"noise", "", Adversary{"noise", 1}, ""},
		{"noise", "0.5", Adversary{"noise", 0.5}, ""},
		{"noise", "0", Adversary{}, "> 0"},
		{"noise", "NaN", Adversary{}, "within"},
		{"noise", "1e9", Adversary{}, "within"},
		{"signflip", "", Adversary{"signflip", 1}, ""},
		{"signflip", "-1", Adversary{}, "> 0"},
		{"scale", "", Adversary{"scale", 10}, ""},
		{"scale", "-3", Adversary{"scale", -3}, ""},
		{"scale", "1", Adversary{}, "other than 1"},
		{"nan", "", Adversary{"nan", 0.01}, ""},
		{"nan", "1", Adversary{"nan", 1}, ""},
		{"nan", "0", Adversary{}, "(0,1]"},
		{"nan", "1.5", Adversary{}, "(0,1]"},
		{"replay", "", Adversary{"replay", 5}, ""},
		{"replay", "0", Adversary{"replay", 0}, ""},
		{"replay", "-1", Adversary{}, "seconds >= 0"},
		{"wrongdim", "", Adversary{"wrongdim", 1}, ""},
		{"wrongdim", "-2", Adversary{"wrongdim", -2}, ""},
		{"wrongdim", "0", Adversary{}, "whole number"},
		{"wrongdim", "0.5", Adversary{}, "whole number"},
		{"flood", "", Adversary{"flood", 200}, ""},
		{"flood", "abc", Adversary{}, "not a number"},
		{"flood", "0", Adversary{}, "> 0"},
		{"boast", "", Adversary{"boast", 1000}, ""},
		{"boast", "2", Adversary{"boast", 2}, ""},
		{"boast", "1", Adversary{}, "> 1"},
		{"boast", "0.5", Adversary{}, "> 1"},
		{"bogus", "", Adversary{}, `adversary "bogus": want one of`},
	} {
		got, err := ParseAdversary(tc.kind, tc.strength)
		if tc.err == "" {
			if err != nil || got != tc.want {
				t.Errorf("ParseAdversary(%q, %q) = %+v, %v; want %+v", tc.kind, tc.strength, got, err, tc.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParseAdversary(%q, %q) = %+v, %v; want an error with %q", tc.kind, tc.strength, got, err, tc.err)
		} else if !errors.Is(err, ErrBadConfig) {
			t.Errorf("ParseAdversary(%q, %q): %v does not wrap ErrBadConfig", tc.kind, tc.strength, err)
		}
	}
}

func TestAdversaryUnlockGate(t *testing.T) {
	for _, v := range []string{"", "1", "yes", "true", UnlockAdversaryValue + " ", strings.ToLower(UnlockAdversaryValue)} {
		err := CheckAdversaryUnlocked(func(k string) string {
			if k == UnlockAdversaryEnv {
				return v
			}
			return UnlockAdversaryValue // other variables do not count
		})
		if !errors.Is(err, ErrAdversaryLocked) || !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s=%q: %v, want locked", UnlockAdversaryEnv, v, err)
		}
	}
	if err := CheckAdversaryUnlocked(func(k string) string {
		if k == UnlockAdversaryEnv {
			return UnlockAdversaryValue
		}
		return ""
	}); err != nil {
		t.Errorf("unlocked: %v", err)
	}

	// Through Config.Validate, as every entry point (flags, settings file,
	// environment) reaches it.
	cfg := DefaultConfig()
	cfg.Adversary = Adversary{Kind: AdversaryNaN, Strength: 0.01}
	t.Setenv(UnlockAdversaryEnv, "")
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("an honest node needs no unlock: %v", err)
	}
	err := cfg.Validate()
	if !errors.Is(err, ErrAdversaryLocked) || !errors.Is(err, ErrBadConfig) {
		t.Fatalf("locked: %v, want ErrAdversaryLocked", err)
	}
	if msg := err.Error(); !strings.Contains(msg, UnlockAdversaryEnv+"="+UnlockAdversaryValue) || strings.Count(msg, "\n") > 0 {
		t.Errorf("the refusal does not say how to unlock, in one line: %q", msg)
	}
	t.Setenv(UnlockAdversaryEnv, UnlockAdversaryValue)
	if err := cfg.Validate(); err != nil {
		t.Fatalf("unlocked: %v", err)
	}
	bad := cfg
	bad.Adversary.Strength = 2
	if err := bad.Validate(); err == nil || errors.Is(err, ErrAdversaryLocked) || !strings.Contains(err.Error(), "(0,1]") {
		t.Errorf("unlocked, bad strength: %v", err)
	}
	for _, mode := range []Mode{ModeSync, ModeLocal} {
		c := cfg
		c.Mode = mode
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "only a node in gossip mode") {
			t.Errorf("adversary in %s mode: %v", mode, err)
		}
	}
}

func randomVector(n int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 9))
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(0.3 * r.NormFloat64())
	}
	return v
}

func rms(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s / float64(len(v)))
}

func TestAttackTransforms(t *testing.T) {
	const n = 100000
	src := randomVector(n, 1)
	snap := params.Snapshot{Fingerprint: params.Fingerprint{7}, Step: 12, Progress: 384, Params: src}
	orig := slices.Clone(src)
	attack := func(kind string, strength float64) params.Snapshot {
		t.Helper()
		a := newAttacker(Adversary{Kind: kind, Strength: strength}, 1, time.Now)
		out := a.attack(snap)
		if !slices.Equal(src, orig) {
			t.Fatalf("%s wrote to the snapshot it attacked", kind)
		}
		if out.Fingerprint != snap.Fingerprint || out.Step != snap.Step || out.Progress != snap.Progress || len(out.Params) != n {
			t.Fatalf("%s changed the metadata: %+v", kind, out)
		}
		return out
	}

	for _, k := range []float64{1, 0.1} {
		out := attack(AdversaryNoise, k)
		var mean, sq float64
		for i := range out.Params {
			d := float64(out.Params[i] - src[i])
			mean += d / n
			sq += d * d / n
		}
		sd, want := math.Sqrt(sq-mean*mean), k*rms(src)
		if math.Abs(sd-want) > 0.02*want || math.Abs(mean) > 0.02*want {
			t.Errorf("noise %g: deviations of mean %g and sd %g, want 0 and %g", k, mean, sd, want)
		}
	}
	for _, tc := range []struct {
		kind     string
		strength float64
		factor   float32
	}{
		{AdversarySignFlip, 1, -1},
		{AdversarySignFlip, 2, -2},
		{AdversaryScale, 10, 10},
		{AdversaryScale, -0.5, -0.5},
	} {
		out := attack(tc.kind, tc.strength)
		for i, x := range out.Params {
			if x != tc.factor*src[i] {
				t.Fatalf("%s %g: element %d is %g, want %g", tc.kind, tc.strength, i, x, tc.factor*src[i])
			}
		}
	}
	// These act on the frame or on the traffic: the vector goes out as it is.
	for _, kind := range []string{AdversaryNaN, AdversaryWrongDim, AdversaryFlood} {
		a := newAttacker(Adversary{Kind: kind, Strength: defaultStrength[kind]}, 1, time.Now)
		if out := a.attack(snap); &out.Params[0] != &src[0] {
			t.Errorf("%s copied the vector", kind)
		}
		if hook := a.tamper(1); (hook != nil) != (kind != AdversaryFlood) {
			t.Errorf("%s: frame hook set %v", kind, hook != nil)
		}
	}
	for _, kind := range []string{AdversaryNoise, AdversarySignFlip, AdversaryScale, AdversaryReplay, AdversaryBoast} {
		if newAttacker(Adversary{Kind: kind, Strength: defaultStrength[kind]}, 1, time.Now).tamper(1) != nil {
			t.Errorf("%s tampers with frames", kind)
		}
	}
	// A boaster sends its model as it is, claiming strength times its
	// progress, and announces that claim too.
	b := newAttacker(Adversary{Kind: AdversaryBoast, Strength: 1000}, 1, time.Now)
	if out := b.attack(snap); &out.Params[0] != &src[0] || out.Progress != 1000*snap.Progress || out.Step != snap.Step {
		t.Errorf("boast: sent progress %v and step %d (the vector shared: %v); want %v, %d and the vector as it is",
			out.Progress, out.Step, &out.Params[0] == &src[0], 1000*snap.Progress, snap.Step)
	}
	nd := &Node{}
	if got := nd.announced(gossip.Announcement{Progress: 384, Samples: 500}); got.Progress != 384 || got.Samples != 500 {
		t.Errorf("an honest node announced %+v", got)
	}
	nd.hooks.adv = b
	if got := nd.announced(gossip.Announcement{Progress: 384, Samples: 500}); got.Progress != 384000 || got.Samples != 500 {
		t.Errorf("a boaster announced progress %v and samples %v; want 384000 and 500", got.Progress, got.Samples)
	}
}

// TestReplay: the honest model until Strength seconds after the first
// model sent, then the model of that moment forever, under each call's own
// step and progress.
func TestReplay(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	a := newAttacker(Adversary{Kind: AdversaryReplay, Strength: 5}, 1, clock)
	snap := func(step int64, seed uint64) params.Snapshot {
		return params.Snapshot{Step: step, Progress: params.Progress(32 * step), Params: randomVector(100, seed)}
	}

	// Time before the first model sent (before training) does not count.
	advance(time.Hour)
	s1 := snap(10, 1)
	if out := a.attack(s1); !slices.Equal(out.Params, s1.Params) || out.Step != 10 {
		t.Fatalf("first model sent: step %d, want the honest model", out.Step)
	}
	advance(4 * time.Second)
	s2 := snap(20, 2)
	if out := a.attack(s2); !slices.Equal(out.Params, s2.Params) {
		t.Fatal("4 s in: want the honest model")
	}
	advance(time.Second)
	s3 := snap(30, 3)
	captured := slices.Clone(s3.Params)
	if out := a.attack(s3); !slices.Equal(out.Params, captured) || out.Step != 30 {
		t.Fatal("5 s in: want the model of now")
	}
	s3.Params[0] = 99 // the capture is a copy
	for i, d := range []time.Duration{time.Second, time.Hour} {
		advance(d)
		s := snap(int64(1000+i), uint64(4+i))
		out := a.attack(s)
		if !slices.Equal(out.Params, captured) {
			t.Fatalf("%v later: not the captured model", d)
		}
		if out.Step != s.Step || out.Progress != s.Progress {
			t.Fatalf("%v later: step %d progress %v, want the current %d and %v", d, out.Step, out.Progress, s.Step, s.Progress)
		}
	}
}

// hostileConfig is a gossip node on the local profile training softmax
// regression on the synthetic set, at an emulated 2 ms a step (mostly
// sleep), announcing every 200 ms so peers find each other at once. Its
// defences are off: these tests are about what an attacker sends, which a
// victim that cuts it off after the first refusals would hide.
func hostileConfig(network string) Config {
	c := DefaultConfig()
	c.Trust.Enabled = false
	c.Dataset = train.DatasetSynthetic
	c.Train.Model = "softmax"
	c.Train.Batch = 16
	c.Epochs = 0
	c.Train.LR = 0.05
	c.Train.Schedule = "const"
	c.Train.Seed = 7
	c.Train.BaseStep = time.Millisecond
	c.Train.Slowdown = 2
	c.Train.Network, c.Host.Network = network, network
	c.Host.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	c.Exchange.ChunkTimeout = 5 * time.Second
	c.Exchange.ExchangeTimeout = 10 * time.Second
	c.ExchangeTimeout = 10 * time.Second
	c.Announce.Interval, c.Announce.FreshWindow, c.Announce.MaxAge = 200*time.Millisecond, 3*time.Second, 3*time.Second
	c.AvgInterval = 100 * time.Millisecond
	c.CatchUp = 0
	c.CheckpointEvery = 0
	c.ReportEvery = time.Second
	return c
}

// hostilePair starts an honest node that does not run (it serves,
// announces and hands what it receives to its inbound queue, where the
// test reads it, but never trains or merges) and a running attacker
// joined to it. Both stop when the test ends.
func hostilePair(t *testing.T, adv Adversary) (honest, attacker *Node) {
	t.Helper()
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	t.Setenv(UnlockAdversaryEnv, UnlockAdversaryValue)
	net := "hostile-" + adv.Kind
	honest, err := New(context.Background(), hostileConfig(net), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, _ = honest.Run(ctx, nil) // closes the mesh
	})
	ac := hostileConfig(net)
	ac.Adversary = adv
	if ac.Host.Bootstrap, err = ParseBootstrap(honest.Addrs()); err != nil {
		t.Fatal(err)
	}
	if attacker, err = New(context.Background(), ac, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := attacker.Run(ctx, nil); done <- err }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("attacker: %v", err)
		}
	})
	return honest, attacker
}

// waitFor polls cond until it holds; the limit only turns a hang into a
// failure with a message.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cosine is the cosine similarity of a and b.
func cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}

func norm(v []float32) float64 { return rms(v) * math.Sqrt(float64(len(v))) }

// TestHostileNodeSendsAttackedModels: what a signflip or scale node sends,
// both in the exchanges it starts and in what it serves, is its model
// attacked, while its own model trains on untouched.
func TestHostileNodeSendsAttackedModels(t *testing.T) {
	for _, tc := range []struct {
		adv    Adversary
		cos    float64 // of the sent model with the attacker's own
		factor float64 // of their norms
	}{
		{Adversary{AdversarySignFlip, 1}, -1, 1},
		{Adversary{AdversaryScale, 10}, 1, 10},
	} {
		t.Run(tc.adv.Kind, func(t *testing.T) {
			honest, attacker := hostilePair(t, tc.adv)
			check := func(how string, got []float32) {
				t.Helper()
				own := attacker.trainer.SnapshotInto(nil).Params
				// The attacker trains on between the two snapshots; at 2 ms a
				// step its model moves little.
				if c, f := cosine(got, own), norm(got)/norm(own); math.Abs(c-tc.cos) > 0.1 || math.Abs(f-tc.factor) > 0.1*tc.factor {
					t.Errorf("%s: cosine %.4f and norm ratio %.4f with the attacker's model, want %g and %g", how, c, f, tc.cos, tc.factor)
				}
			}
			// The exchanges the attacker starts (its averager).
			select {
			case in := <-honest.avg.inbound:
				if in.from != attacker.ID() {
					t.Fatalf("model from %s, want the attacker", in.from)
				}
				check("exchange it started", in.snap.Params)
			case <-time.After(time.Minute):
				t.Fatal("the attacker never started an exchange")
			}
			// What it serves.
			got, err := honest.svc.Pull(t.Context(), attacker.ID())
			if err != nil {
				t.Fatal(err)
			}
			check("served", got.Params)
			// Its own model is not the attacked one.
			if c := cosine(got.Params, attacker.trainer.SnapshotInto(nil).Params); tc.cos < 0 && c > 0 {
				t.Errorf("the attacker's own model follows what it sends (cosine %.3f)", c)
			}
		})
	}
}

// TestHostileNodeRefused: the honest side refuses the models a nan or
// wrongdim node sends, under the reason its reputation hears, and takes
// none of them; a flood shows as flood and busy refusals. (What a nan or
// wrongdim node serves is checked at the gossip level.)
func TestHostileNodeRefused(t *testing.T) {
	for _, tc := range []struct {
		adv     Adversary
		reasons []gossip.Reason
	}{
		{Adversary{AdversaryNaN, 0.01}, []gossip.Reason{gossip.ReasonNonFinite}},
		{Adversary{AdversaryWrongDim, 3}, []gossip.Reason{gossip.ReasonSizeMismatch}},
		{Adversary{AdversaryFlood, 200}, []gossip.Reason{gossip.ReasonFlood, gossip.ReasonBusy}},
	} {
		t.Run(tc.adv.Kind, func(t *testing.T) {
			honest, attacker := hostilePair(t, tc.adv)
			waitFor(t, "the honest node to refuse "+tc.adv.Kind, func() bool {
				for _, r := range tc.reasons {
					if honest.counters.Rejected(r) == 0 {
						return false
					}
				}
				return true
			})
			select {
			case in := <-honest.avg.inbound:
				if tc.adv.Kind != AdversaryFlood {
					t.Errorf("the honest node accepted a model from %s", in.from)
				}
			default:
			}
			for _, v := range [][]float32{attacker.trainer.SnapshotInto(nil).Params, honest.trainer.SnapshotInto(nil).Params} {
				for _, x := range v {
					if x-x != 0 {
						t.Fatal("a trainer's model holds a non-finite value")
					}
				}
			}
		})
	}
}
