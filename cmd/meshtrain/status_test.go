package main

import (
	"encoding/json"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// apiBody returns the pinned body of one endpoint from the api package's
// golden files, so the CLI is tested against the shapes the server is
// tested to produce.
func apiBody(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "api", "testdata", name+".golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Body json.RawMessage `json:"body"`
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return g.Body
}

// fakeAPI serves the golden status and peers bodies; peers may be replaced.
func fakeAPI(t *testing.T, peers []byte) *httptest.Server {
	t.Helper()
	status := apiBody(t, "status")
	if peers == nil {
		peers = apiBody(t, "peers")
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/status":
			_, _ = w.Write(status)
		case "/v1/peers":
			_, _ = w.Write(peers)
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"status":404,"error":"no such endpoint"}`))
		}
	}))
	t.Cleanup(ts.Close)
	return ts
}

func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestStatusTable(t *testing.T) {
	ts := fakeAPI(t, nil)
	for _, addr := range []string{ts.URL, strings.TrimPrefix(ts.URL, "http://")} {
		code, out, errOut := run(t, "status", "--api", addr)
		if code != exitOK || errOut != "" {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		for _, want := range []string{
			"12D3KooWHxkqBTjZqZ8yDyGGpdhhKpsZBVmWJ5NsS8BLVnqL7N6v", "main (mode gossip, profile local)", "1,234 (epoch 2)",
			"78,976 samples", "0.3125", "91.25%", "3,457 samples/s, busy 97.0%", "2 (57 merges, 1 catch-ups)",
			"45 started, 38 served, 4 failed (1 timed out; 4% of the latest 100), 2 inbound dropped", "117.7 MiB sent, 94.2 MiB received",
			"private (AutoNAT): peers reach this node through 1 relay address(es), then by hole punching",
			"hole punches    2 of 3 succeeded",
			"1 direct, 1 relayed, 0 not connected (no models go over a relay: relayed peers are skipped); 1 backing off",
			"1 slot(s) held, 1 relayed connection(s) open (5 in all), 40.0 KiB relayed; each cut after 2m0s or 128.0 KiB",
			"3 (checksum 2, stale 1)", "from …tKm5XXP8mA, staleness 1.50, weight 0.312", "#7 at step 1,200",
			"/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWHxkqBTjZqZ8yDyGGpdhhKpsZBVmWJ5NsS8BLVnqL7N6v\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("status output lacks %q:\n%s", want, out)
			}
		}
	}
}

func TestStatusJSONIsTheNodesAnswer(t *testing.T) {
	ts := fakeAPI(t, nil)
	code, out, _ := run(t, "status", "--api", ts.URL, "--json")
	if code != exitOK || out != string(apiBody(t, "status")) {
		t.Fatalf("exit %d, output %q", code, out)
	}
	code, out, _ = run(t, "peers", "--json", "--api", ts.URL)
	if code != exitOK || out != string(apiBody(t, "peers")) {
		t.Fatalf("peers: exit %d, output %q", code, out)
	}
}

func TestPeersTable(t *testing.T) {
	ts := fakeAPI(t, nil)
	code, out, errOut := run(t, "peers", "--api", ts.URL)
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "STALENESS") {
		t.Fatalf("want a header and three rows:\n%s", out)
	}
	for i, want := range [][]string{
		{"…tKm5XXP8mA", "gossip", "1,100", "70,400", "133.0", "90.50%", "0.75", "hole-punched", "30"},
		{"…1Nft9HyQ6X", "local", "600", "634.0", "85.00%", "  -  ", "relayed", "27"},
		{"…4wxn6kQgE7", "-45.00 banned", " -"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i+1], w) {
				t.Errorf("row %d lacks %q: %q", i, w, lines[i+1])
			}
		}
	}
	_, out, _ = run(t, "peers", "--api", ts.URL, "--wide")
	if !strings.Contains(out, "12D3KooWRBhwfeP2Y9CDkFRBAZ1pmxUadH36TKuk3KtKm5XXP8mA  /ip4/127.0.0.1/tcp/4002/") {
		t.Errorf("--wide lacks full IDs and addresses:\n%s", out)
	}
	empty := fakeAPI(t, []byte(`{"peers":[]}`))
	if code, out, _ := run(t, "peers", "--api", empty.URL); code != exitOK || out != "no fresh peers\n" {
		t.Errorf("no peers: exit %d, %q", code, out)
	}
}

func TestStatusUnreachableIsOneLineExitOne(t *testing.T) {
	addr := closedPort(t)
	for _, cmd := range []string{"status", "peers"} {
		for _, extra := range [][]string{nil, {"--json"}} {
			code, out, errOut := run(t, append([]string{cmd, "--api", addr}, extra...)...)
			if code != exitFailure || out != "" {
				t.Errorf("%s %v: exit %d, stdout %q", cmd, extra, code, out)
			}
			if strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "unreachable") || !strings.Contains(errOut, addr) {
				t.Errorf("%s %v: stderr %q", cmd, extra, errOut)
			}
		}
	}
}

func TestStatusOfSomethingElseExitsOne(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "<html>not a node</html>")
	}))
	defer ts.Close()
	for _, args := range [][]string{{"status"}, {"status", "--json"}, {"peers"}} {
		code, _, errOut := run(t, append(args, "--api", ts.URL)...)
		if code != exitFailure || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
}

func TestStatusBadFlagsExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{"status", "--api", "nonsense"}, {"status", "--api", "ftp://x:1"}, {"status", "--api", ""},
		{"status", "--timeout", "0s"}, {"status", "--timeout", "soon"}, {"status", "--bogus"}, {"status", "extra"},
		{"peers", "--api", "127.0.0.1"}, {"peers", "--wide=maybe"}, {"peers", "x"},
		{"node", "--api", "nonsense"}, {"node", "--api", "127.0.0.1:99999"},
	} {
		code, out, errOut := run(t, args...)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
}

func TestStatusReadsAPIFromEnvironment(t *testing.T) {
	ts := fakeAPI(t, nil)
	t.Setenv("MESHTRAIN_API", ts.URL)
	if code, out, _ := run(t, "status"); code != exitOK || !strings.Contains(out, "1,234") {
		t.Fatalf("exit %d: %s", code, out)
	}
}

func TestNodeAPIPortTakenExitsOne(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	code, _, errOut := run(t, "node", "--api", l.Addr().String(), "--no-data-dir", "--dataset", "synthetic")
	if code != exitFailure || !strings.Contains(errOut, l.Addr().String()) || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

func TestNodeAPIDefaultPortTakenMovesOn(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var o, eb strings.Builder
	e := &env{stdout: &o, stderr: &eb, name: "meshtrain node"}
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	fs.String("api", l.Addr().String(), "")
	a, err := listenNodeAPI(e, fs, l.Addr().String(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer a.stop()
	if a.l.Addr().String() == l.Addr().String() || !strings.Contains(eb.String(), "in use") {
		t.Fatalf("listening on %s, stderr %q", a.l.Addr(), eb.String())
	}
	// Chosen explicitly, a taken port is an error.
	if err := fs.Set("api", l.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if _, err := listenNodeAPI(e, fs, l.Addr().String(), false); err == nil {
		t.Fatal("explicit --api on a taken port accepted")
	}
}

func TestNodeAPIWarnsOffLoopback(t *testing.T) {
	var o, eb strings.Builder
	e := &env{stdout: &o, stderr: &eb, name: "meshtrain node"}
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	fs.String("api", "", "")
	// A documentation address no interface has: the warning comes first,
	// then the bind fails, and nothing is sent anywhere.
	a, err := listenNodeAPI(e, fs, "192.0.2.1:0", false)
	if err == nil {
		a.stop()
	}
	if strings.Count(eb.String(), "warning: --api 192.0.2.1:0 is reachable from other machines") != 1 {
		t.Fatalf("stderr %q", eb.String())
	}
	eb.Reset()
	a, err = listenNodeAPI(e, fs, "127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	a.stop()
	if eb.Len() != 0 {
		t.Fatalf("warning for a loopback address: %q", eb.String())
	}
	if a, err := listenNodeAPI(e, fs, "", false); err != nil || a.l != nil {
		t.Fatalf("empty --api: %v", err)
	}
}

func TestFormatting(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234", 0.6: "1"} {
		if got := count(v); got != want {
			t.Errorf("count(%v) = %q, want %q", v, got, want)
		}
	}
	for v, want := range map[float64]string{0.00025: "250 µs", 0.0123: "12.3 ms", 5: "5.0 s", 125: "2m5s", 7200: "2h0m0s", 0: "0 s", 3 * 86400: "3d0h"} {
		if got := secs(v); got != want {
			t.Errorf("secs(%v) = %q, want %q", v, got, want)
		}
	}
	for v, want := range map[float64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 3 << 30: "3.0 GiB"} {
		if got := size(v); got != want {
			t.Errorf("size(%v) = %q, want %q", v, got, want)
		}
	}
	if short("short") != "short" || short("12D3KooWRBhwfeP2Y9CDkFRBAZ1pmxUadH36TKuk3KtKm5XXP8mA") != "…tKm5XXP8mA" {
		t.Error("short")
	}
}
