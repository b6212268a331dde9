package train

import "testing"

func TestScheduleWarmupPercent(t *testing.T) {
	s, err := ParseSchedule("cosine:warmup=4%")
	if err != nil {
		t.Fatal(err)
	}
	if s.String() != "cosine:warmup=4%" {
		t.Fatalf("round trip %q", s)
	}
	r, err := s.Resolve(10000)
	if err != nil || r.Warmup != 400 || r.Total != 10000 {
		t.Fatalf("resolve: %+v %v", r, err)
	}
	if r.Factor(200) != 0.5 {
		t.Fatalf("halfway through warmup: %v", r.Factor(200))
	}
	if _, err := (Schedule{Kind: "const", WarmupFrac: 0.1}).Resolve(0); err == nil {
		t.Fatal("a percentage warmup without a total was accepted")
	}
	for _, bad := range []string{"cosine:warmup=0%", "cosine:warmup=100%", "cosine:warmup=x%", "cosine:total=5%"} {
		if _, err := ParseSchedule(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	// The default schedule fits a small shard as well as MNIST.
	d := DefaultConfig()
	ds, err := Synthetic(DefaultSynthetic())
	if err != nil {
		t.Fatal(err)
	}
	d.Shard = "3/8"
	if _, err := New(d, ds); err != nil {
		t.Fatalf("default config on a small shard: %v", err)
	}
}
