package api

import (
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func TestDashboardServesPageAndAssets(t *testing.T) {
	s, _ := newServer(t, newFake())
	rec := serve(s, "GET", "/")
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("/: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	page := rec.Body.String()
	for _, want := range []string{`data-points="0"`, `id="chart-loss"`, `id="chart-accuracy"`, `id="chart-speed"`,
		`id="peer-rows"`, `src="/assets/dashboard.js"`, `href="/assets/dashboard.css"`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if n := strings.Count(page, "<canvas"); n != 3 {
		t.Errorf("%d canvases, want 3", n)
	}
	for name, ctype := range map[string]string{"dashboard.js": "text/javascript; charset=utf-8", "dashboard.css": "text/css; charset=utf-8"} {
		rec := serve(s, "GET", "/assets/"+name)
		if rec.Code != 200 || rec.Header().Get("Content-Type") != ctype || rec.Body.Len() == 0 {
			t.Errorf("%s: %d %q %d bytes", name, rec.Code, rec.Header().Get("Content-Type"), rec.Body.Len())
		}
		etag := rec.Header().Get("ETag")
		req := httptest.NewRequest("GET", "/assets/"+name, nil)
		req.Header.Set("If-None-Match", etag)
		rec2 := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec2, req)
		if etag == "" || rec2.Code != 304 {
			t.Errorf("%s: revalidation with ETag %q: %d, want 304", name, etag, rec2.Code)
		}
	}
}

// The page must work offline and load nothing from other origins.
func TestDashboardHasNoExternalReferences(t *testing.T) {
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}|@import|<iframe`)
	if len(assets) != 3 {
		t.Fatalf("%d embedded assets, want 3", len(assets))
	}
	for name, a := range assets {
		if m := external.FindString(string(a.body)); m != "" {
			t.Errorf("%s references %q", name, m)
		}
	}
	js := string(assets["dashboard.js"].body)
	// Remote peers choose their IDs and addresses; none of it may become HTML.
	for _, unsafe := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
		if strings.Contains(js, unsafe) {
			t.Errorf("dashboard.js uses %s", unsafe)
		}
	}
	for _, want := range []string{"/v1/status", "/v1/history", "/v1/peers", "peer-row", "dataset.points"} {
		if !strings.Contains(js, want) {
			t.Errorf("dashboard.js lacks %q", want)
		}
	}
}
