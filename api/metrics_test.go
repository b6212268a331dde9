package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/meshtrain/meshtrain/node"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func scrape(t *testing.T, s *Server) (int, map[string]*dto.MetricFamily) {
	t.Helper()
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Accept", "text/plain")
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	if !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") {
		t.Fatalf("content type %q", rec.Header().Get("Content-Type"))
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(rec.Body.Bytes()))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, rec.Body)
	}
	return rec.Code, fams
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

func labels(m *dto.Metric) string {
	var parts []string
	for _, l := range m.Label {
		v := l.GetValue()
		if l.GetName() == "goversion" {
			v = "GO" // the toolchain's, not ours
		}
		parts = append(parts, fmt.Sprintf("%s=%q", l.GetName(), v))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func TestMetricsNamesTypesAndValues(t *testing.T) {
	f := newFake()
	s, _ := newServer(t, countingFake{fakeSource: f, n: 79000})
	code, fams := scrape(t, s)
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	want := map[string]dto.MetricType{
		"meshtrain_steps_total":                  dto.MetricType_COUNTER,
		"meshtrain_samples_total":                dto.MetricType_COUNTER,
		"meshtrain_merges_total":                 dto.MetricType_COUNTER,
		"meshtrain_rejected_inputs_total":        dto.MetricType_COUNTER,
		"meshtrain_bytes_sent_total":             dto.MetricType_COUNTER,
		"meshtrain_bytes_received_total":         dto.MetricType_COUNTER,
		"meshtrain_exchange_timeouts_total":      dto.MetricType_COUNTER,
		"meshtrain_exchanges_failed_total":       dto.MetricType_COUNTER,
		"meshtrain_exchanges_total":              dto.MetricType_COUNTER,
		"meshtrain_catch_ups_total":              dto.MetricType_COUNTER,
		"meshtrain_catch_up_claims_cut_total":    dto.MetricType_COUNTER,
		"meshtrain_network_wait_seconds_total":   dto.MetricType_COUNTER,
		"meshtrain_busy_seconds_total":           dto.MetricType_COUNTER,
		"meshtrain_peers":                        dto.MetricType_GAUGE,
		"meshtrain_loss":                         dto.MetricType_GAUGE,
		"meshtrain_test_accuracy":                dto.MetricType_GAUGE,
		"meshtrain_samples_per_second":           dto.MetricType_GAUGE,
		"meshtrain_busy_fraction":                dto.MetricType_GAUGE,
		"meshtrain_progress_samples":             dto.MetricType_GAUGE,
		"meshtrain_checkpoint_step":              dto.MetricType_GAUGE,
		"meshtrain_checkpoint_timestamp_seconds": dto.MetricType_GAUGE,
		"meshtrain_build_info":                   dto.MetricType_GAUGE,
		"meshtrain_node_info":                    dto.MetricType_GAUGE,
		"go_goroutines":                          dto.MetricType_GAUGE,
		"go_memstats_heap_alloc_bytes":           dto.MetricType_GAUGE,
		"process_cpu_seconds_total":              dto.MetricType_COUNTER,
		"meshtrain_last_merge_staleness_steps":   dto.MetricType_GAUGE,
		"meshtrain_announcements_total":          dto.MetricType_COUNTER,
		"meshtrain_pubsub_bytes_total":           dto.MetricType_COUNTER,
		"meshtrain_inbound_dropped_total":        dto.MetricType_COUNTER,
		"meshtrain_refused_by_peer_total":        dto.MetricType_COUNTER,
		"meshtrain_uptime_seconds":               dto.MetricType_GAUGE,
		"meshtrain_epoch":                        dto.MetricType_GAUGE,
		"meshtrain_last_merge_weight":            dto.MetricType_GAUGE,
	}
	for name, typ := range want {
		fam, ok := fams[name]
		if !ok {
			t.Errorf("%s missing", name)
			continue
		}
		if fam.GetType() != typ {
			t.Errorf("%s is %v, want %v", name, fam.GetType(), typ)
		}
		if fam.GetHelp() == "" {
			t.Errorf("%s has no help", name)
		}
	}
	for name, fam := range fams {
		if !strings.HasPrefix(name, "meshtrain_") {
			continue
		}
		if (fam.GetType() == dto.MetricType_COUNTER) != strings.HasSuffix(name, "_total") {
			t.Errorf("%s: counters and only counters end in _total", name)
		}
		for _, unit := range []string{"_ms", "_milliseconds", "_kb", "_mb", "_percent"} {
			if strings.Contains(name, unit) {
				t.Errorf("%s: not a base unit", name)
			}
		}
	}
	one := func(name string) float64 {
		fam := fams[name]
		if fam == nil || len(fam.Metric) != 1 {
			t.Fatalf("%s: want one series, got %v", name, fam)
		}
		return value(fam.Metric[0])
	}
	for name, v := range map[string]float64{
		"meshtrain_steps_total": 1234, "meshtrain_samples_total": 79000, "meshtrain_merges_total": 57,
		"meshtrain_bytes_sent_total": 123456789, "meshtrain_bytes_received_total": 98765432,
		"meshtrain_exchange_timeouts_total": 1, "meshtrain_peers": 2, "meshtrain_loss": 0.3125,
		"meshtrain_test_accuracy": 0.9125, "meshtrain_samples_per_second": 3456.5, "meshtrain_busy_fraction": 0.97,
		"meshtrain_progress_samples": 78976, "meshtrain_checkpoint_step": 1200, "meshtrain_build_info": 1,
		"meshtrain_checkpoint_timestamp_seconds": float64(t0.Unix() - 10),
	} {
		if got := one(name); got != v {
			t.Errorf("%s = %v, want %v", name, got, v)
		}
	}
	rej := map[string]float64{}
	for _, m := range fams["meshtrain_rejected_inputs_total"].Metric {
		rej[m.Label[0].GetValue()] = value(m)
	}
	if rej["checksum"] != 2 || rej["stale"] != 1 || rej["oversize"] != 0 || len(rej) != 15 {
		t.Errorf("rejected_inputs_total by reason: %v (every reason is exported, zero or not)", rej)
	}
}

func TestMetricsGolden(t *testing.T) {
	s, _ := newServer(t, newFake())
	_, fams := scrape(t, s)
	var lines []string
	for name, fam := range fams {
		if !strings.HasPrefix(name, "meshtrain_") {
			continue
		}
		lines = append(lines, fmt.Sprintf("# %s %s %s", name, fam.GetType(), fam.GetHelp()))
		for _, m := range fam.Metric {
			lines = append(lines, fmt.Sprintf("%s%s %v", name, labels(m), value(m)))
		}
	}
	sort.Strings(lines)
	got := []byte(strings.Join(lines, "\n") + "\n")
	path := filepath.Join("testdata", "metrics.golden.txt")
	if os.Getenv("UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("metrics differ from %s (UPDATE_GOLDEN=1 rewrites it)\ngot:\n%s", path, got)
	}
}

func TestMetricsWithoutOptionalSeries(t *testing.T) {
	f := newFake()
	f.status.LastCheckpoint, f.status.LastMerge = nil, nil
	s, _ := newServer(t, f)
	_, fams := scrape(t, s)
	for _, name := range []string{"meshtrain_samples_total", "meshtrain_checkpoint_step", "meshtrain_last_merge_weight"} {
		if _, ok := fams[name]; ok {
			t.Errorf("%s exported without data behind it", name)
		}
	}
	if _, ok := fams["meshtrain_steps_total"]; !ok {
		t.Error("steps_total missing")
	}
}

func TestMetricsSurviveAPanickingSource(t *testing.T) {
	f := newFake()
	f.panicOn = "Status"
	s, logs := newServer(t, f)
	req := httptest.NewRequest("GET", "/metrics", nil)
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	// The runtime series still come out; the node's are reported broken.
	if !strings.Contains(rec.Body.String(), "go_goroutines") || strings.Contains(rec.Body.String(), "meshtrain_steps_total ") {
		t.Errorf("status %d body:\n%s", rec.Code, rec.Body)
	}
	if !strings.Contains(logs.String(), "metrics collection panicked") {
		t.Errorf("panic not logged: %s", logs)
	}
	f.mu.Lock()
	f.panicOn = ""
	f.mu.Unlock()
	if code, fams := scrape(t, s); code != 200 || fams["meshtrain_steps_total"] == nil {
		t.Errorf("scrape after the panic: %d", code)
	}
}

func BenchmarkScrape(b *testing.B) {
	s, err := New(newFake(), DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/metrics", nil)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatal(rec.Code)
		}
	}
}

func BenchmarkStatus(b *testing.B) {
	s, err := New(newFake(), DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/v1/status", nil)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatal(rec.Code)
		}
	}
}

// TestExternalTrainerStatus: an external trainer's connection is in the
// status (every field the schema names) and its refusals in /metrics.
func TestExternalTrainerStatus(t *testing.T) {
	f := newFake()
	f.status.Trainer = &node.TrainerStatus{Kind: "external", Connected: true, LastPushS: 0.25,
		Rejected: map[string]int64{"bad_shape": 2, "non_finite": 1}}
	s, _ := newServer(t, f)
	rec := serve(s, "GET", "/v1/status")
	var body struct {
		Trainer map[string]any `json:"trainer"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"kind", "connected", "last_push_s", "rejected"} {
		if _, ok := body.Trainer[k]; !ok {
			t.Errorf("status.trainer lacks %s: %v", k, body.Trainer)
		}
	}
	_, fams := scrape(t, s)
	fam := fams["meshtrain_trainer_rejections_total"]
	if fam == nil {
		t.Fatal("no meshtrain_trainer_rejections_total")
	}
	got := map[string]float64{}
	for _, m := range fam.Metric {
		got[labels(m)] = value(m)
	}
	if got[`{code="bad_shape"}`] != 2 || got[`{code="non_finite"}`] != 1 || len(got) != 2 {
		t.Fatalf("trainer rejections %v", got)
	}
}
