package node_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/node"
)

// badFields are one bad setting per row and a piece of the message that
// must name it.
var badFields = []struct {
	name string
	set  func(*node.Config)
	want string
}{
	{"dataset", func(c *node.Config) { c.Dataset = "imagenet" }, `dataset "imagenet"`},
	{"mode", func(c *node.Config) { c.Mode = "turbo" }, `mode "turbo"`},
	{"profile", func(c *node.Config) { c.Host.Profile = "galaxy" }, `profile "galaxy"`},
	{"host network", func(c *node.Config) { c.Host.Network = "elsewhere" }, `host network "elsewhere" differs`},
	{"announce", func(c *node.Config) {
		c.Host.Announce = []string{"/ip4/1.2.3.4/udp/1/quic-v1/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN", "tcp/1"}
	},
		`announce address "tcp/1"`},
	{"avg interval", func(c *node.Config) { c.AvgInterval = 0 }, "avg-interval 0s"},
	{"exchange timeout", func(c *node.Config) { c.ExchangeTimeout = -time.Second }, "exchange timeout -1s"},
	{"merge alpha", func(c *node.Config) { c.Merger.Alpha = 1.5 }, "alpha 1.5"},
	{"catch-up", func(c *node.Config) { c.CatchUp = -1 }, "catch-up -1"},
	{"max upload", func(c *node.Config) { c.MaxUpload = -5 }, "max-upload -5"},
	{"sync timeout", func(c *node.Config) { c.SyncTimeout = 0 }, "sync-timeout 0s"},
	{"inner steps", func(c *node.Config) { c.InnerSteps = 0 }, "inner-steps 0"},
	{"inner steps scaling", func(c *node.Config) { c.InnerScaling = "fast" }, `inner-steps-scaling "fast"`},
	{"outer lr", func(c *node.Config) { c.OuterLR = 0 }, "outer-lr 0"},
	{"outer momentum", func(c *node.Config) { c.OuterMomentum = 1 }, "outer-momentum 1"},
	{"exchange chunk timeout", func(c *node.Config) { c.Exchange.ChunkTimeout = 0 }, "ChunkTimeout 0s"},
	{"announce peers", func(c *node.Config) { c.Announce.MaxPeers = 0 }, "MaxPeers 0"},
	{"checkpoint every", func(c *node.Config) { c.CheckpointEvery = -time.Minute }, "checkpoint-every -1m0s"},
	{"eval every", func(c *node.Config) { c.EvalEvery = -time.Second }, "eval-every -1s"},
	{"report every", func(c *node.Config) { c.ReportEvery = 0 }, "report-every 0s"},
	{"until accuracy", func(c *node.Config) { c.UntilAccuracy = math.NaN() }, "until-accuracy NaN"},
	{"max steps", func(c *node.Config) { c.MaxSteps = -1 }, "max-steps -1"},
	{"duration", func(c *node.Config) { c.Duration = -time.Hour }, "duration -1h0m0s"},
	{"train batch", func(c *node.Config) { c.Train.Batch = 0 }, "batch 0"},
}

func TestConfigValidate(t *testing.T) {
	if err := node.DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	for _, tc := range badFields {
		t.Run(tc.name, func(t *testing.T) {
			c := node.DefaultConfig()
			tc.set(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %q", err, tc.want)
			}
			if !errors.Is(err, node.ErrBadConfig) {
				t.Errorf("%v does not wrap node.ErrBadConfig", err)
			}
			if n := len(err.(interface{ Unwrap() []error }).Unwrap()); n != 1 {
				t.Errorf("one bad field reported as %d errors: %v", n, err)
			}
		})
	}
}

// TestConfigValidateReportsEveryField sets every bad field of the table at
// once: one error per field, each named.
func TestConfigValidateReportsEveryField(t *testing.T) {
	c := node.DefaultConfig()
	for _, tc := range badFields {
		tc.set(&c)
	}
	err := c.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, tc := range badFields {
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %q missing from\n%v", tc.name, tc.want, err)
		}
	}
	if n := len(err.(interface{ Unwrap() []error }).Unwrap()); n != len(badFields) {
		t.Errorf("%d errors for %d bad fields:\n%v", n, len(badFields), err)
	}
}

// TestConfigValidateOffline: an offline node has no mesh, so the mesh
// settings are not its problem; the rest still are.
func TestConfigValidateOffline(t *testing.T) {
	c := node.DefaultConfig()
	c.Offline = true
	c.Mode, c.Host.Profile, c.AvgInterval, c.Exchange.ChunkTimeout = "turbo", "galaxy", 0, 0
	if err := c.Validate(); err != nil {
		t.Errorf("offline config with bad mesh settings: %v", err)
	}
	c.ReportEvery = 0
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "report-every") {
		t.Errorf("offline config with a bad report interval: %v", err)
	}
}

// TestConfigValidateNetworkName: the network name ends up in the announce
// topic, so a name the topic cannot carry is a config error, not a failure
// of New after the host is up.
func TestConfigValidateNetworkName(t *testing.T) {
	c := node.DefaultConfig()
	c.Train.Network, c.Host.Network = "my mesh", "my mesh"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `"my mesh"`) {
		t.Errorf("network %q: %v", c.Host.Network, err)
	}
}

// TestParseWire: --wire-dtype's values, and the default's name.
func TestParseWire(t *testing.T) {
	for _, tc := range []struct {
		in   string
		d    gossip.DType
		auto bool
	}{{"auto", gossip.FP16, true}, {"fp16", gossip.FP16, false}, {"fp32", gossip.FP32, false}, {"int8", gossip.INT8, false}} {
		d, auto, err := node.ParseWire(tc.in)
		if err != nil || d != tc.d || auto != tc.auto {
			t.Errorf("ParseWire(%q) = %v, %v, %v", tc.in, d, auto, err)
		}
		c := node.DefaultConfig()
		c.Exchange.SendDType, c.WireAuto = d, auto
		if got := c.WireName(); got != tc.in {
			t.Errorf("WireName of %q = %q", tc.in, got)
		}
	}
	if _, _, err := node.ParseWire("int4"); err == nil || !strings.Contains(err.Error(), "auto") {
		t.Errorf("ParseWire(int4): %v, want an error naming auto", err)
	}
	if got := node.DefaultConfig().WireName(); got != node.WireAuto {
		t.Errorf("the default's --wire-dtype is %q, want auto", got)
	}
}
