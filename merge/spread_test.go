package merge

import (
	"math"
	"testing"
	"time"
)

// TestPeerSpreadOutlier: a model is an outlier only against what the other
// peers send now, one vote per peer.
func TestPeerSpreadOutlier(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const scale = 20
	t.Run("needs two other peers", func(t *testing.T) {
		var s peerSpread
		if s.outlier("a", 1, scale, t0) || s.outlier("b", 1e6, scale, t0) {
			t.Fatal("an outlier with fewer than two other peers to compare with")
		}
		if !s.outlier("c", 1e6, scale, t0) {
			t.Fatal("1e6 against 1 and 1e6 (median 1): not an outlier")
		}
	})
	t.Run("distances growing together", func(t *testing.T) {
		// A warmup: every honest distance grows 1000x within a few rounds;
		// none is ever an outlier, since the others grow too.
		var s peerSpread
		d := 1e-4
		for round := range 40 {
			for _, p := range []string{"a", "b", "c", "d"} {
				if s.outlier(p, d*(1+0.1*float64(len(p))), scale, t0.Add(time.Duration(round)*50*time.Millisecond)) {
					t.Fatalf("round %d: honest peer %s at %g refused", round, p, d)
				}
			}
			d *= 1.2
		}
		if !s.outlier("x", 100*d, scale, t0.Add(3*time.Second)) {
			t.Fatal("a model 100x farther than every honest one is not an outlier")
		}
	})
	t.Run("a flooder has one vote", func(t *testing.T) {
		var s peerSpread
		for _, p := range []string{"a", "b", "c"} {
			s.outlier(p, 1, scale, t0)
		}
		for i := range 1000 {
			s.outlier("x", 1e9, scale, t0.Add(time.Duration(i)*time.Millisecond))
		}
		if s.outlier("a", 1.5, scale, t0.Add(time.Second)) {
			t.Fatal("an honest model refused after a flood of far models from one peer")
		}
		if !s.outlier("x", 1e9, scale, t0.Add(time.Second)) {
			t.Fatal("the flooder's far model is not an outlier")
		}
	})
	t.Run("stale entries expire", func(t *testing.T) {
		var s peerSpread
		s.outlier("a", 1, scale, t0)
		s.outlier("b", 1, scale, t0)
		later := t0.Add(spreadTTL + time.Second)
		if s.outlier("c", 1e6, scale, later) {
			t.Fatal("compared with distances older than the TTL")
		}
		if len(s.latest) != 1 {
			t.Fatalf("%d entries after expiry, want 1 (c)", len(s.latest))
		}
	})
	t.Run("not a distance", func(t *testing.T) {
		var s peerSpread
		for _, d := range []float64{math.NaN(), math.Inf(1), -1} {
			if !s.outlier("a", d, scale, t0) {
				t.Errorf("distance %v not an outlier", d)
			}
		}
	})
	t.Run("bounded", func(t *testing.T) {
		var s peerSpread
		for i := range spreadMaxPeers + 10 {
			s.outlier(string(rune(i)), 1, scale, t0)
		}
		if len(s.latest) > spreadMaxPeers {
			t.Fatalf("%d entries, bound %d", len(s.latest), spreadMaxPeers)
		}
	})
}
