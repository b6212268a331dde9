//go:build e2e

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browserNode is a `meshtrain node` with its API on a port it picked.
type browserNode struct {
	p   *proc
	api string // http://127.0.0.1:PORT
}

var apiURL = regexp.MustCompile(`http://127\.0\.0\.1:\d+`)

// startBrowserNode starts a node with --api 127.0.0.1:0 and waits for the
// line that names the address, then drains its events in the background.
func startBrowserNode(t *testing.T, args ...string) *browserNode {
	t.Helper()
	base := []string{"node", "--profile", "local", "--no-data-dir", "--dataset", "synthetic", "--json",
		"--listen", "/ip4/127.0.0.1/tcp/0", "--api", "127.0.0.1:0", "--epochs", "0", "--schedule", "const",
		"--threads", "1", "--eval-every", "1s", "--avg-interval", "500ms", "--announce-interval", "500ms",
		// 10 ms steps, mostly asleep: the swarm and the browser share the machine.
		"--slowdown", "2", "--base-step", "5ms"}
	p := start(t, nil, append(base, args...)...)
	deadline := time.After(60 * time.Second)
	for {
		select {
		case e, ok := <-p.events:
			if !ok {
				t.Fatalf("node exited before serving its API: %s", p.stderr)
			}
			if e.Event != "api" {
				continue
			}
			u := apiURL.FindString(e.Message)
			if u == "" {
				t.Fatalf("api event without a loopback URL: %q", e.Message)
			}
			go func() {
				for range p.events {
				}
			}()
			return &browserNode{p: p, api: u}
		case <-deadline:
			t.Fatalf("no api event within 60s: %s", p.stderr)
		}
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
}

type peersBody struct {
	Peers []struct {
		PeerID string `json:"peer_id"`
	} `json:"peers"`
}

// chartState is what the page reports about itself.
type chartState struct {
	Points map[string]int `json:"points"`
	Rows   []string       `json:"rows"`
	Live   string         `json:"live"`
	Marker bool           `json:"marker"`
}

const readState = `(() => ({
	points: Object.fromEntries([...document.querySelectorAll("figure.chart")].map(f => [f.dataset.series, +f.dataset.points])),
	rows: [...document.querySelectorAll("tr.peer-row")].map(r => r.dataset.peer),
	live: document.querySelector("#conn").dataset.state,
	marker: window.__meshtrainTestMarker === true,
}))()`

// The bar: two real nodes, the dashboard of one in headless
// Chromium; every chart holds more than one point, the peer table has one
// row per peer, and both keep updating without a reload.
func TestE2EDashboardInBrowser(t *testing.T) {
	chromium := os.Getenv("MESHTRAIN_CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("this test drives Chromium: install it (Debian: apt-get install chromium) or set MESHTRAIN_CHROMIUM: %v", err)
	}
	a := startBrowserNode(t)
	var st struct {
		Addrs []string `json:"addrs"`
	}
	getJSON(t, a.api+"/v1/status", &st)
	var boot string
	for _, ad := range st.Addrs {
		if strings.Contains(ad, "/tcp/") {
			boot = ad
		}
	}
	if boot == "" {
		t.Fatalf("node A has no TCP address: %v", st.Addrs)
	}
	b := startBrowserNode(t, "--bootstrap", boot)

	// Wait for the mesh to form, from the API's point of view.
	var peers peersBody
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		getJSON(t, a.api+"/v1/peers", &peers)
		if len(peers.Peers) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node A sees %d peers after 90s, want 1", len(peers.Peers))
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox, // root in a container has no user namespaces for the sandbox
		chromedp.DisableGPU,
		chromedp.WindowSize(1400, 1000),
		// Nothing but the node on loopback: no update checks, no telemetry.
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("no-pings", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()

	ready := `(() => {
		const charts = [...document.querySelectorAll("figure.chart")];
		return charts.length === 3 && charts.every(f => +f.dataset.points > 1) &&
			document.querySelectorAll("tr.peer-row").length > 0;
	})()`
	if err := chromedp.Do(bctx,
		chromedp.Navigate(a.api+"/"),
		chromedp.Evaluate[chromedp.Void](`window.__meshtrainTestMarker = true`),
		chromedp.Poll[chromedp.Void](ready, chromedp.WithPollingTimeout(90*time.Second), chromedp.WithPollingInterval(250*time.Millisecond)),
	); err != nil {
		t.Fatalf("dashboard never showed charts and peers: %v", err)
	}
	first, err := chromedp.Run(bctx, chromedp.Evaluate[chartState](readState))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first view: %+v", first)
	for _, series := range []string{"loss", "accuracy", "samples_per_s"} {
		if first.Points[series] <= 1 {
			t.Errorf("chart %s holds %d points, want more than one", series, first.Points[series])
		}
	}
	getJSON(t, a.api+"/v1/peers", &peers)
	if len(first.Rows) != len(peers.Peers) {
		t.Errorf("peer table has %d rows, the API lists %d peers", len(first.Rows), len(peers.Peers))
	}
	for i := range min(len(first.Rows), len(peers.Peers)) {
		if first.Rows[i] != peers.Peers[i].PeerID {
			t.Errorf("row %d is %s, the API says %s", i, first.Rows[i], peers.Peers[i].PeerID)
		}
	}

	// Polling, not reloading: the same page (marker intact) gains points.
	grown := fmt.Sprintf(`document.querySelector("#chart-loss").dataset.points > %d && window.__meshtrainTestMarker === true`,
		first.Points["loss"])
	if err := chromedp.Do(bctx, chromedp.Poll[chromedp.Void](grown, chromedp.WithPollingTimeout(60*time.Second))); err != nil {
		t.Fatalf("the loss chart did not grow without a reload: %v", err)
	}
	later, err := chromedp.Run(bctx, chromedp.Evaluate[chartState](readState))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("later view: %+v", later)
	if !later.Marker || later.Live != "live" || len(later.Rows) != 1 {
		t.Errorf("later view %+v: want the same page, live, one peer row", later)
	}
	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(t.TempDir(), "dashboard.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("MESHTRAIN_SCREENSHOT_DIR"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		shot = filepath.Join(dir, "dashboard.png")
		if err := os.WriteFile(shot, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))

	// The model the API hands out is one `meshtrain eval` can score.
	resp, err := http.Get(a.api + "/v1/model")
	if err != nil {
		t.Fatal(err)
	}
	model, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/v1/model: %s, %v", resp.Status, err)
	}
	file := filepath.Join(t.TempDir(), "model.safetensors")
	if err := os.WriteFile(file, model, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "eval", file, "--json").Output()
	if err != nil {
		t.Fatalf("eval of the downloaded model: %v", err)
	}
	var ev struct {
		TestAccuracy float64 `json:"test_accuracy"`
	}
	if err := json.Unmarshal(out, &ev); err != nil || ev.TestAccuracy < 0.5 {
		t.Fatalf("eval of the downloaded model: %s", out)
	}
	t.Logf("downloaded model (%d bytes, step %s): test accuracy %.4f", len(model), resp.Header.Get("X-Meshtrain-Step"), ev.TestAccuracy)

	// A node stopped with SIGINT shuts its API down and exits cleanly.
	for _, n := range []*browserNode{b, a} {
		if err := n.p.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-n.p.done:
			if err != nil {
				t.Errorf("node exit: %v: %s", err, n.p.stderr)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("node did not exit within 60s of SIGINT")
		}
		if resp, err := http.Get(n.api + "/healthz"); err == nil {
			resp.Body.Close()
			t.Errorf("%s still answers after the node exited", n.api)
		}
	}
}
