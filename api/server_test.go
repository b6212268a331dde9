package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/params"
)

// logBuffer collects log output safely from handler goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newServer(t *testing.T, src Source) (*Server, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	cfg := DefaultConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	s, err := New(src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, logs
}

// serve sends one request straight to the handler chain.
func serve(s *Server, method, target string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	return rec
}

// golden is what a golden file pins about one response.
type golden struct {
	Status      int             `json:"status"`
	ContentType string          `json:"content_type"`
	Allow       string          `json:"allow,omitempty"`
	Body        json.RawMessage `json:"body"`
}

func checkGolden(t *testing.T, name string, rec *httptest.ResponseRecorder) {
	t.Helper()
	var body bytes.Buffer
	if err := json.Indent(&body, rec.Body.Bytes(), "  ", "  "); err != nil {
		t.Fatalf("%s: body is not JSON: %v: %q", name, err, rec.Body.String())
	}
	got, err := json.MarshalIndent(golden{Status: rec.Code, ContentType: rec.Header().Get("Content-Type"),
		Allow: rec.Header().Get("Allow"), Body: body.Bytes()}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", name+".golden.json")
	if os.Getenv("UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with UPDATE_GOLDEN=1 to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: response differs from %s (UPDATE_GOLDEN=1 rewrites it)\ngot:\n%s\nwant:\n%s", name, path, got, want)
	}
}

func TestEndpointsGolden(t *testing.T) {
	cases := []struct{ name, method, target string }{
		{"status", "GET", "/v1/status"},
		{"peers", "GET", "/v1/peers"},
		{"history", "GET", "/v1/history"},
		{"history_n2", "GET", "/v1/history?n=2"},
		{"checkpoints", "GET", "/v1/checkpoints"},
		{"healthz", "GET", "/healthz"},
		{"readyz", "GET", "/readyz"},
		{"error_not_found", "GET", "/v1/nope"},
		{"error_method", "POST", "/v1/status"},
		{"error_bad_n", "GET", "/v1/history?n=abc"},
		{"error_query_too_long", "GET", "/v1/status?x=" + strings.Repeat("a", 2000)},
	}
	s, _ := newServer(t, newFake())
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkGolden(t, c.name, serve(s, c.method, c.target))
		})
	}
}

func TestEmptySourceListsAreArrays(t *testing.T) {
	f := newFake()
	f.peers, f.hist, f.ckpts = nil, nil, nil
	s, _ := newServer(t, f)
	for path, key := range map[string]string{"/v1/peers": "peers", "/v1/history": "points", "/v1/checkpoints": "checkpoints"} {
		rec := serve(s, "GET", path)
		var m map[string]json.RawMessage
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil || rec.Code != 200 {
			t.Fatalf("%s: %d %v", path, rec.Code, err)
		}
		if string(m[key]) != "[]" {
			t.Errorf("%s: %s is %s, want []", path, key, m[key])
		}
	}
}

func TestHistoryN(t *testing.T) {
	s, _ := newServer(t, newFake())
	for _, c := range []struct {
		q    string
		code int
		n    int
	}{
		{"", 200, 3}, {"?n=1", 200, 1}, {"?n=3", 200, 3}, {"?n=100000", 200, 3},
		{"?n=0", 400, 0}, {"?n=-1", 400, 0}, {"?n=1e3", 400, 0}, {"?n=", 400, 0}, {"?n=100001", 400, 0},
		{"?n=1&n=2", 400, 0}, {"?n=99999999999999999999", 400, 0}, {"?other=1", 200, 3},
	} {
		rec := serve(s, "GET", "/v1/history"+c.q)
		if rec.Code != c.code {
			t.Errorf("%q: status %d, want %d: %s", c.q, rec.Code, c.code, rec.Body)
			continue
		}
		if c.code != 200 {
			var e ErrorResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Status != c.code || e.Error == "" {
				t.Errorf("%q: error body %q", c.q, rec.Body)
			}
			continue
		}
		var h HistoryResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &h); err != nil {
			t.Fatal(err)
		}
		if len(h.Points) != c.n {
			t.Errorf("%q: %d points, want %d", c.q, len(h.Points), c.n)
		}
		if c.n == 1 && h.Points[0].Step != 1234 {
			t.Errorf("n=1 returned step %d, want the newest point", h.Points[0].Step)
		}
	}
}

func TestWrongMethodsAndUnknownPaths(t *testing.T) {
	s, _ := newServer(t, newFake())
	for _, path := range []string{"/v1/status", "/v1/peers", "/v1/history", "/v1/model", "/v1/checkpoints",
		"/healthz", "/readyz", "/metrics", "/"} {
		for _, m := range []string{"POST", "PUT", "DELETE", "PATCH"} {
			rec := serve(s, m, path)
			if rec.Code != http.StatusMethodNotAllowed {
				t.Errorf("%s %s: %d, want 405", m, path, rec.Code)
			}
			if allow := rec.Header().Get("Allow"); !strings.Contains(allow, "GET") || !strings.Contains(allow, "HEAD") {
				t.Errorf("%s %s: Allow %q", m, path, allow)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("%s %s: content type %q", m, path, ct)
			}
		}
		if rec := serve(s, "HEAD", path); rec.Code != 200 && !(path == "/readyz" && rec.Code == 503) {
			t.Errorf("HEAD %s: %d", path, rec.Code)
		}
	}
	for _, path := range []string{"/v1", "/v1/", "/v1/status/extra", "/v2/status", "/index.html", "/assets/",
		"/assets/nope.js", "/assets/index.html", "/favicon.ico", "/%2e%2e/etc/passwd"} {
		rec := serve(s, "GET", path)
		if rec.Code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, rec.Code)
			continue
		}
		var e ErrorResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Status != 404 {
			t.Errorf("GET %s: body %q", path, rec.Body)
		}
	}
}

func TestModelDownload(t *testing.T) {
	f := newFake()
	s, _ := newServer(t, f)
	rec := serve(s, "GET", "/v1/model")
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	h := rec.Header()
	if h.Get(HeaderFingerprint) != f.snap.Fingerprint.String() || h.Get(HeaderStep) != "1234" || h.Get(HeaderProgress) != "78976" {
		t.Errorf("headers %v", h)
	}
	if h.Get("Content-Type") != "application/octet-stream" || h.Get("Content-Length") != fmt.Sprint(rec.Body.Len()) {
		t.Errorf("content headers %v (body %d bytes)", h, rec.Body.Len())
	}
	if cd := h.Get("Content-Disposition"); !strings.Contains(cd, f.snap.Fingerprint.Short()) || !strings.Contains(cd, "step1234") {
		t.Errorf("content disposition %q", cd)
	}
	l, v, meta, err := params.ReadSafetensors(bytes.NewReader(rec.Body.Bytes()), 0)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Equal(f.layout) {
		t.Errorf("layout %s, want %s", l, f.layout)
	}
	for i := range v {
		if v[i] != f.snap.Params[i] {
			t.Fatalf("param %d: %v, want %v", i, v[i], f.snap.Params[i])
		}
	}
	want := map[string]string{"model": "mlp:3", "dataset": "synthetic", "network": "main", "seed": "42",
		"fingerprint": f.snap.Fingerprint.String(), "step": "1234", "progress": "78976", "format": "pt"}
	for k, w := range want {
		if meta[k] != w {
			t.Errorf("metadata %s = %q, want %q", k, meta[k], w)
		}
	}
	if rec := serve(s, "HEAD", "/v1/model"); rec.Code != 200 || rec.Body.Len() != 0 || rec.Header().Get("Content-Length") == "" {
		t.Errorf("HEAD: %d, %d bytes, length %q", rec.Code, rec.Body.Len(), rec.Header().Get("Content-Length"))
	}
}

func TestModelLayoutMismatchIs500(t *testing.T) {
	f := newFake()
	f.snap.Params = f.snap.Params[:4]
	s, logs := newServer(t, f)
	rec := serve(s, "GET", "/v1/model")
	if rec.Code != 500 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, %q", rec.Code, rec.Body)
	}
	if !strings.Contains(logs.String(), "model export failed") {
		t.Errorf("not logged: %s", logs)
	}
}

func TestModelDownloadsAreBounded(t *testing.T) {
	f := newFake()
	f.block, f.entered = make(chan struct{}), make(chan struct{}, 1)
	logs := &logBuffer{}
	cfg := DefaultConfig()
	cfg.MaxModelDownloads = 1
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	s, err := New(f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan int)
	go func() { first <- serve(s, "GET", "/v1/model").Code }()
	<-f.entered
	rec := serve(s, "GET", "/v1/model")
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("second download: %d, Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
	}
	close(f.block)
	if code := <-first; code != 200 {
		t.Errorf("first download: %d", code)
	}
	f.block = nil
	if rec := serve(s, "GET", "/v1/model"); rec.Code != 200 {
		t.Errorf("download after the first finished: %d", rec.Code)
	}
}

func TestCheckpointErrorIs500(t *testing.T) {
	f := newFake()
	f.ckptErr = errors.New("store: closed")
	s, _ := newServer(t, f)
	rec := serve(s, "GET", "/v1/checkpoints")
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), "store: closed") {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}

func TestReadiness(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(f *fakeSource)
		code  int
		cause string
	}{
		{"ready", func(*fakeSource) {}, 200, ""},
		{"no step", func(f *fakeSource) { f.status.Step = 0 }, 503, "step"},
		{"no host", func(f *fakeSource) { f.status.PeerID, f.status.Addrs = "", nil }, 503, "mesh"},
		{"no addrs", func(f *fakeSource) { f.status.Addrs = nil }, 503, "mesh"},
		{"offline", func(f *fakeSource) { f.status.PeerID, f.status.Addrs, f.status.Mode = "", nil, Offline }, 200, ""},
		{"offline no step", func(f *fakeSource) { f.status.Mode, f.status.Step = Offline, 0 }, 503, "step"},
	}
	for _, c := range cases {
		f := newFake()
		c.edit(f)
		s, _ := newServer(t, f)
		rec := serve(s, "GET", "/readyz")
		var h HealthResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &h); err != nil {
			t.Fatal(err)
		}
		if rec.Code != c.code || !strings.Contains(h.Reason, c.cause) || (c.code == 200) != (h.Status == "ok") {
			t.Errorf("%s: %d %+v, want %d with %q", c.name, rec.Code, h, c.code, c.cause)
		}
		// Liveness does not depend on readiness.
		if rec := serve(s, "GET", "/healthz"); rec.Code != 200 {
			t.Errorf("%s: healthz %d", c.name, rec.Code)
		}
	}
}

func TestNonFiniteValuesAreNull(t *testing.T) {
	f := newFake()
	f.status.Loss = math.NaN()
	f.status.LastMerge.Staleness = math.Inf(1)
	f.peers[0].Loss = math.Inf(-1)
	f.hist[2].Loss = math.NaN()
	shared := f.status.LastMerge
	s, _ := newServer(t, f)
	for path, want := range map[string]string{
		"/v1/status":  `"loss":null`,
		"/v1/peers":   `"loss":null`,
		"/v1/history": `"loss":null`,
	} {
		rec := serve(s, "GET", path)
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("%s: %d %s", path, rec.Code, rec.Body)
		}
		var v any
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			t.Errorf("%s: invalid JSON: %v", path, err)
		}
	}
	rec := serve(s, "GET", "/v1/status")
	if !strings.Contains(rec.Body.String(), `"staleness":null`) || !strings.Contains(rec.Body.String(), `"test_accuracy":0.9125`) {
		t.Errorf("status: %s", rec.Body)
	}
	if !math.IsInf(shared.Staleness, 1) {
		t.Error("encoding wrote to the source's memory")
	}
}

func TestFiniteCopyKinds(t *testing.T) {
	type inner struct {
		F32 float32
		Arr [2]float64
		Any any
		M   map[string]float64
	}
	v := struct {
		A  float64
		P  *inner
		S  []float32
		N  *inner
		u  float64
		OK float64
	}{A: math.NaN(), P: &inner{F32: float32(math.Inf(1)), Arr: [2]float64{1, math.Inf(-1)}, Any: math.NaN(),
		M: map[string]float64{"x": math.NaN(), "y": 2}}, S: []float32{float32(math.NaN()), 1.5}, u: math.NaN(), OK: 0.25}
	b, err := marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"A":null,"P":{"F32":null,"Arr":[1,null],"Any":null,"M":{"x":null,"y":2}},"S":[null,1.5],"N":null,"OK":0.25}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	if !math.IsNaN(v.A) || !math.IsInf(float64(v.P.F32), 1) || !math.IsNaN(v.P.M["x"]) {
		t.Fatal("marshal modified its input")
	}
	if _, err := marshal(func() {}); err == nil {
		t.Fatal("unencodable value accepted")
	}
}

func TestPanicInHandlerIsRecovered(t *testing.T) {
	for _, method := range []string{"Status", "Peers", "History", "Snapshot", "Checkpoints"} {
		f := newFake()
		f.panicOn = method
		s, logs := newServer(t, f)
		path := map[string]string{"Status": "/v1/status", "Peers": "/v1/peers", "History": "/v1/history",
			"Snapshot": "/v1/model", "Checkpoints": "/v1/checkpoints"}[method]
		rec := serve(s, "GET", path)
		if rec.Code != 500 {
			t.Errorf("%s: %d, want 500", path, rec.Code)
		}
		var e ErrorResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Status != 500 || strings.Contains(e.Error, "exploded") {
			t.Errorf("%s: body %q (the panic value must stay in the log)", path, rec.Body)
		}
		if l := logs.String(); !strings.Contains(l, "handler panicked") || !strings.Contains(l, "exploded") {
			t.Errorf("%s: panic not logged: %s", path, l)
		}
		if rec := serve(s, "GET", "/healthz"); rec.Code != 200 {
			t.Errorf("%s: server unhealthy after a panic: %d", path, rec.Code)
		}
	}
}

func TestPanicAfterResponseStartedAbortsConnection(t *testing.T) {
	s, logs := newServer(t, newFake())
	h := s.recover(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		_, _ = w.Write([]byte("partial"))
		w.(http.Flusher).Flush()
		panic("late")
	}))
	ts := httptest.NewServer(h)
	defer ts.Close()
	resp, err := ts.Client().Get(ts.URL)
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Fatal("a response that panicked midway read as complete")
	}
	if !strings.Contains(logs.String(), "late") {
		t.Errorf("not logged: %s", logs)
	}
}

// start serves s on a loopback port and returns its base URL.
func start(t *testing.T, s *Server) string {
	t.Helper()
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + l.Addr().String()
}

func TestHugeHeadersAre431(t *testing.T) {
	s, _ := newServer(t, newFake())
	base := start(t, s)
	req, _ := http.NewRequest("GET", base+"/v1/status", nil)
	req.Header.Set("X-Junk", strings.Repeat("j", 64<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d, want 431", resp.StatusCode)
	}
	// A long query under the header limit gets 414 from the query cap.
	resp, err = http.Get(base + "/v1/history?n=" + strings.Repeat("9", 4000))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestURITooLong {
		t.Fatalf("long query: %d, want 414", resp.StatusCode)
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestSlowHeadersAreCutOff(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ReadHeaderTimeout = 200 * time.Millisecond
	s, err := New(newFake(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	base := start(t, s)
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Half a request line, then nothing: the server must hang up.
	if _, err := c.Write([]byte("GET /v1/status HTTP/1.1\r\nHost: x\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = bufio.NewReader(c).ReadString('\n')
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("server kept a connection with unfinished headers open")
	}
}

func TestShutdownIsIdempotentAndServeReturnsNil(t *testing.T) {
	s, _ := newServer(t, newFake())
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	resp, err := http.Get("http://" + l.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("serve returned %v after shutdown", err)
	}
	if _, err := http.Get("http://" + l.Addr().String() + "/healthz"); err == nil {
		t.Fatal("server still answers after shutdown")
	}
}

func TestShutdownCutsOffSlowRequests(t *testing.T) {
	f := newFake()
	f.block, f.entered = make(chan struct{}), make(chan struct{}, 1)
	defer close(f.block)
	s, _ := newServer(t, f)
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(l) }()
	go func() {
		if resp, err := http.Get("http://" + l.Addr().String() + "/v1/model"); err == nil {
			resp.Body.Close()
		}
	}()
	<-f.entered
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("shutdown with a stuck request: %v", err)
	}
}

func TestSecurityHeaders(t *testing.T) {
	s, _ := newServer(t, newFake())
	for _, path := range []string{"/", "/v1/status", "/nope"} {
		h := serve(s, "GET", path).Header()
		if h.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(h.Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("%s: headers %v", path, h)
		}
	}
}

func TestConfigValidateReportsEveryField(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	c := Config{}
	err := c.Validate()
	if !errors.Is(err, ErrBadConfig) {
		t.Fatalf("zero config: %v", err)
	}
	for _, field := range []string{"read header timeout", "read timeout", "write timeout", "idle timeout",
		"max header bytes", "max query bytes", "max history", "max model downloads", "max metrics scrapes"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("%q not reported in %v", field, err)
		}
	}
	if _, err := New(nil, DefaultConfig()); !errors.Is(err, ErrBadConfig) {
		t.Errorf("nil source: %v", err)
	}
	if _, err := New(newFake(), c); !errors.Is(err, ErrBadConfig) {
		t.Errorf("bad config accepted: %v", err)
	}
}

func TestCheckAddr(t *testing.T) {
	for _, c := range []struct {
		addr     string
		loopback bool
		ok       bool
	}{
		{"127.0.0.1:8080", true, true}, {"localhost:8080", true, true}, {"[::1]:0", true, true},
		{"127.1.2.3:80", true, true}, {"0.0.0.0:8080", false, true}, {":8080", false, true},
		{"192.168.1.5:8080", false, true}, {"example.org:80", false, true},
		{"8080", false, false}, {"127.0.0.1", false, false}, {"127.0.0.1:http", false, false},
		{"127.0.0.1:70000", false, false}, {"127.0.0.1:-1", false, false}, {"", false, false},
	} {
		lb, err := CheckAddr(c.addr)
		if (err == nil) != c.ok || (c.ok && lb != c.loopback) {
			t.Errorf("%q: loopback %v err %v", c.addr, lb, err)
		}
		if err != nil && !errors.Is(err, ErrBadAddr) {
			t.Errorf("%q: error %v does not wrap ErrBadAddr", c.addr, err)
		}
	}
	if _, err := Listen("nonsense"); !errors.Is(err, ErrBadAddr) {
		t.Errorf("Listen(nonsense): %v", err)
	}
}

func TestConcurrentRequests(t *testing.T) {
	f := newFake()
	s, _ := newServer(t, f)
	paths := []string{"/v1/status", "/v1/peers", "/v1/history?n=2", "/v1/model", "/v1/checkpoints", "/metrics",
		"/", "/readyz", "/assets/dashboard.js"}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 20 {
				p := paths[(i+j)%len(paths)]
				if rec := serve(s, "GET", p); rec.Code != 200 && rec.Code != 503 {
					t.Errorf("%s: %d", p, rec.Code)
				}
				f.mu.Lock()
				f.status.Step++
				f.mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// BenchmarkModel builds /v1/model for the default MNIST MLP (235,146
// parameters, 0.94 MB).
func BenchmarkModel(b *testing.B) {
	f := newFake()
	f.layout = params.MustLayout(
		params.TensorSpec{Name: "fc1.weight", Shape: []int{256, 784}}, params.TensorSpec{Name: "fc1.bias", Shape: []int{256}},
		params.TensorSpec{Name: "fc2.weight", Shape: []int{128, 256}}, params.TensorSpec{Name: "fc2.bias", Shape: []int{128}},
		params.TensorSpec{Name: "fc3.weight", Shape: []int{10, 128}}, params.TensorSpec{Name: "fc3.bias", Shape: []int{10}})
	f.snap.Params = make([]float32, f.layout.Size())
	s, err := New(f, DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/v1/model", nil)
	b.SetBytes(int64(4 * f.layout.Size()))
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatal(rec.Code)
		}
	}
}
