package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzRequest sends arbitrary requests, as net/http reads them off the
// wire, through the API's whole handler chain. No request may make a
// handler panic (the recovery middleware would log it); every answer has
// one of the statuses the API gives and its security headers; a JSON answer
// is valid JSON, and an error is the documented error object naming the
// same status.
func FuzzRequest(f *testing.F) {
	logs := &logBuffer{}
	cfg := DefaultConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	s, err := New(newFake(), cfg)
	if err != nil {
		f.Fatal(err)
	}
	for _, line := range []string{
		"GET /v1/status", "GET /v1/peers", "GET /v1/history", "GET /v1/history?n=2", "GET /v1/history?n=0",
		"GET /v1/history?n=1&n=2", "GET /v1/history?n=99999999999999999999", "GET /v1/model", "HEAD /v1/model",
		"GET /v1/checkpoints", "GET /healthz", "GET /readyz", "GET /metrics", "GET /", "GET /assets/dashboard.js",
		"GET /assets/index.html", "GET /assets/nope", "GET /assets/../v1/status", "GET //v1/status", "POST /v1/status",
		"OPTIONS *", "GET /nope", "GET /v1/status?" + strings.Repeat("a", 2<<10), "GET http://example.com/v1/peers",
	} {
		f.Add([]byte(line + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
	}
	f.Add([]byte("GET /assets/dashboard.css HTTP/1.1\r\nHost: x\r\nRange: bytes=5-2,9-\r\n\r\n"))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\nIf-None-Match: *\r\n\r\n"))
	f.Add([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nAccept: application/openmetrics-text\r\n\r\n"))
	f.Add([]byte("GET /v1/status HTTP/1.0\r\n\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return // net/http answers 400 itself and never calls the handler
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		logs.mu.Lock()
		l := logs.b.String()
		logs.b.Reset()
		logs.mu.Unlock()
		if strings.Contains(l, "panicked") {
			t.Fatalf("%q made a handler panic:\n%s", raw, l)
		}
		switch rec.Code {
		case http.StatusOK, http.StatusPartialContent, http.StatusNotModified, http.StatusMovedPermanently, http.StatusTemporaryRedirect,
			http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusPreconditionFailed,
			http.StatusRequestURITooLong, http.StatusRequestedRangeNotSatisfiable:
		default:
			t.Fatalf("%q: status %d", raw, rec.Code)
		}
		if rec.Header().Get("X-Content-Type-Options") != "nosniff" || rec.Header().Get("Content-Security-Policy") == "" {
			t.Fatalf("%q: no security headers: %v", raw, rec.Header())
		}
		if rec.Header().Get("Content-Type") != "application/json" {
			return
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%q: invalid JSON %q", raw, rec.Body)
		}
		if rec.Code >= 400 {
			var e ErrorResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Status != rec.Code || e.Error == "" {
				t.Fatalf("%q: status %d with error body %q", raw, rec.Code, rec.Body)
			}
		}
	})
}
