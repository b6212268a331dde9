package node_test

import (
	"strings"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/gossip"
)

// TestAutoPrecisionTriesInt8WhenTheLinkSetsThePace: a node on
// --wire-dtype auto whose exchanges keep its link busy for more than twice
// its floor (a floor of 1 µs makes any exchange do so) sends its models as
// int8 after its first exchange, says so in a precision event, and merges
// its peer's models all the same. A node sending fp16 throughout never
// switches.
func TestAutoPrecisionTriesInt8WhenTheLinkSetsThePace(t *testing.T) {
	checkGoroutines(t)
	cfg := meshConfig("precision")
	cfg.Exchange.SendDType, cfg.WireAuto = gossip.FP16, true
	cfg.AvgInterval = time.Microsecond
	a := newMeshNode(t, cfg, nil)
	a.start(t)
	cfg = meshConfig("precision")
	cfg.Exchange.SendDType, cfg.WireAuto = gossip.FP16, false
	cfg.Host.Bootstrap = bootstrapOff(t, a.Node)
	b := newMeshNode(t, cfg, nil)
	b.start(t)
	eventually(t, time.Minute, "the auto node to switch and both to merge", func() bool {
		return len(a.Events("precision")) > 0 && a.Status().Merges >= 3 && b.Status().Merges >= 3
	})
	a.stop(t)
	b.stop(t)
	ev := a.Events("precision")
	if !strings.HasPrefix(ev[0].Message, "models now sent as int8:") || !strings.Contains(ev[0].Message, "floor 1µs") {
		t.Errorf("first precision event %q, want a switch to int8 at the 1µs floor", ev[0].Message)
	}
	for _, e := range ev[1:] {
		if !strings.HasPrefix(e.Message, "models now sent as ") {
			t.Errorf("precision event %q", e.Message)
		}
	}
	if n := len(b.Events("precision")); n != 0 {
		t.Errorf("the fp16 node switched %d times", n)
	}
	if got := b.Status().WireDType; got != "fp16" {
		t.Errorf("the fp16 node sends %q", got)
	}
}
