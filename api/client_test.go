package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestParseBase(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:8080":              "http://127.0.0.1:8080",
		"localhost:9000":              "http://localhost:9000",
		":8080":                       "http://127.0.0.1:8080",
		"[::1]:8080":                  "http://[::1]:8080",
		"http://10.0.0.2:8080/":       "http://10.0.0.2:8080",
		"https://node.example.org":    "https://node.example.org",
		"http://proxy:80/meshtrain/":  "http://proxy:80/meshtrain",
		"  127.0.0.1:8080 ":           "http://127.0.0.1:8080",
		"HTTP://127.0.0.1:8080":       "http://127.0.0.1:8080",
		"http://127.0.0.1:8080/a/b//": "http://127.0.0.1:8080/a/b/",
	} {
		u, err := ParseBase(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if u.String() != want {
			t.Errorf("%q: %s, want %s", in, u, want)
		}
	}
	for _, bad := range []string{"", "8080", "127.0.0.1", "ftp://x:1", "http://", "http://:8080", "http://x:0",
		"http://x:99999", "x:port", "http://x:1/?q=1", "http://u:p@x:1", "http://x:1/#f", "http://[::1"} {
		if _, err := ParseBase(bad); !errors.Is(err, ErrBadAddr) {
			t.Errorf("%q: %v, want ErrBadAddr", bad, err)
		}
	}
}

func TestClientAgainstServer(t *testing.T) {
	f := newFake()
	s, _ := newServer(t, f)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	c, err := NewClient(ts.URL, ts.Client())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	st, err := c.Status(ctx)
	if err != nil || st.PeerID != fakePeer || st.Step != 1234 || st.Gossip.Rejected["checksum"] != 2 ||
		len(st.Gossip.Rejected) != 15 || st.Gossip.BytesSent != 123456789 || st.LastMerge == nil {
		t.Fatalf("status %+v, %v", st, err)
	}
	peers, err := c.Peers(ctx)
	if err != nil || len(peers) != 3 || *peers[0].Reputation != 0.75 || peers[1].Reputation != nil ||
		peers[2].ReputationState != "banned" || peers[2].BannedUntil == nil {
		t.Fatalf("peers %+v, %v", peers, err)
	}
	h, err := c.History(ctx, 2)
	if err != nil || len(h) != 2 || !h[1].Time.Equal(t0) {
		t.Fatalf("history %+v, %v", h, err)
	}
	ck, err := c.Checkpoints(ctx)
	if err != nil || len(ck) != 3 || !ck[2].Corrupt {
		t.Fatalf("checkpoints %+v, %v", ck, err)
	}
	raw, err := c.Raw(ctx, "/v1/peers")
	if err != nil || !strings.HasPrefix(string(raw), `{"peers":[`) {
		t.Fatalf("raw %q, %v", raw, err)
	}
	if _, err := c.Raw(ctx, "/v1/nope"); !errors.Is(err, ErrResponse) || !strings.Contains(err.Error(), "no such endpoint") {
		t.Fatalf("404: %v", err)
	}
}

func TestClientErrors(t *testing.T) {
	// A port nothing listens on: bind one, then close it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c, err := NewClient(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(t.Context()); !errors.Is(err, ErrUnreachable) || strings.Contains(err.Error(), `Get "`) {
		t.Fatalf("closed port: %v", err)
	}

	notAPI := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/status":
			_, _ = w.Write([]byte("<html>hello</html>"))
		case "/v1/peers":
			w.WriteHeader(http.StatusTeapot)
		case "/v1/checkpoints":
			_, _ = w.Write([]byte(`{"checkpoints":null}`))
		default:
			_, _ = w.Write([]byte(strings.Repeat("x", maxResponse+10)))
		}
	}))
	defer notAPI.Close()
	c, _ = NewClient(notAPI.URL, nil)
	if _, err := c.Status(t.Context()); !errors.Is(err, ErrResponse) {
		t.Errorf("HTML body: %v", err)
	}
	if _, err := c.Peers(t.Context()); !errors.Is(err, ErrResponse) || !strings.Contains(err.Error(), "418") {
		t.Errorf("teapot: %v", err)
	}
	if _, err := c.History(t.Context(), 0); !errors.Is(err, ErrResponse) || !strings.Contains(err.Error(), "over") {
		t.Errorf("huge body: %v", err)
	}
	// The API sends [] for an empty list: null or no list is not its answer.
	if l, err := c.Checkpoints(t.Context()); !errors.Is(err, ErrResponse) || !strings.Contains(err.Error(), `no "checkpoints" list`) {
		t.Errorf("null list: %v, %v", l, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := c.Status(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}
