package api

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// These tests keep docs/api.md, docs/openapi.yaml and the Grafana
// dashboard honest: every name they use exists, and everything served is
// described.

var metricName = regexp.MustCompile(`\bmeshtrain_[a-z_]+[a-z]\b`)

func servedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	s, _ := newServer(t, countingFake{fakeSource: newFake(), n: 1})
	_, fams := scrape(t, s)
	out := map[string]bool{}
	for name := range fams {
		if strings.HasPrefix(name, "meshtrain_") {
			out[name] = true
		}
	}
	return out
}

func TestGrafanaDashboardUsesServedMetrics(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "testnet", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	served := servedMetrics(t)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range metricName.FindAllString(tg.Expr, -1) {
				used[m] = true
				if !served[m] {
					t.Errorf("panel %q queries %s, which /metrics does not serve", p.Title, m)
				}
			}
		}
	}
	for _, m := range []string{"meshtrain_loss", "meshtrain_test_accuracy", "meshtrain_samples_per_second",
		"meshtrain_merges_total", "meshtrain_rejected_inputs_total", "meshtrain_bytes_sent_total"} {
		if !used[m] {
			t.Errorf("the dashboard does not chart %s", m)
		}
	}
}

func TestAPIDocDescribesEveryMetric(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for m := range servedMetrics(t) {
		if !strings.Contains(doc, "`"+m+"`") {
			t.Errorf("docs/api.md does not describe %s", m)
		}
	}
	for _, path := range []string{"/v1/status", "/v1/peers", "/v1/history", "/v1/model", "/v1/checkpoints",
		"/healthz", "/readyz", "/metrics"} {
		if !strings.Contains(doc, "## GET "+path) {
			t.Errorf("docs/api.md has no section for %s", path)
		}
	}
}

func TestOpenAPIMatchesResponses(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Paths      map[string]any `yaml:"paths"`
		Components struct {
			Schemas map[string]struct {
				Properties map[string]any `yaml:"properties"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/v1/status", "/v1/peers", "/v1/history", "/v1/model", "/v1/checkpoints",
		"/healthz", "/readyz", "/metrics", "/", "/assets/{file}"} {
		if _, ok := spec.Paths[path]; !ok {
			t.Errorf("openapi.yaml lacks %s", path)
		}
	}
	s, _ := newServer(t, newFake())
	object := func(path string, keys ...string) map[string]any {
		var v any
		if err := json.Unmarshal(serve(s, "GET", path).Body.Bytes(), &v); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			switch x := v.(type) {
			case map[string]any:
				v = x[k]
			case []any:
				v = x[0]
			}
		}
		return v.(map[string]any)
	}
	status := object("/v1/status")
	for schema, obj := range map[string]map[string]any{
		"Status":         status,
		"MergeInfo":      status["last_merge"].(map[string]any),
		"GossipStats":    status["gossip"].(map[string]any),
		"TrustStats":     status["trust"].(map[string]any),
		"RunStatus":      status["run"].(map[string]any),
		"Reachability":   status["reachability"].(map[string]any),
		"RelayService":   status["reachability"].(map[string]any)["relay_service"].(map[string]any),
		"PeerStatus":     object("/v1/peers", "peers", "0"),
		"Point":          object("/v1/history", "points", "0"),
		"CheckpointInfo": object("/v1/checkpoints", "checkpoints", "0"),
		"Error":          object("/nope"),
		"Health":         object("/readyz"),
	} {
		props := spec.Components.Schemas[schema].Properties
		var got, want []string
		for k := range obj {
			got = append(got, k)
		}
		for k := range props {
			// Fields sent only in some states (documented as such).
			if _, sent := obj[k]; !sent && optionalFields[schema+"."+k] {
				continue
			}
			want = append(want, k)
		}
		sort.Strings(got)
		sort.Strings(want)
		if strings.Join(got, ",") != strings.Join(want, ",") && schema != "Health" {
			t.Errorf("schema %s declares %v; the server sends %v", schema, want, got)
		}
		for _, k := range got {
			if _, ok := props[k]; !ok {
				t.Errorf("schema %s lacks %s", schema, k)
			}
		}
	}
}

// TestOpenAPISchemasAreTheTypes: each schema declares exactly the JSON
// fields of the api type it names, so a field added to a type (even one
// the fake never sends, like alone) must be described.
func TestOpenAPISchemasAreTheTypes(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]any `yaml:"properties"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	for schema, typ := range map[string]reflect.Type{
		"Status": reflect.TypeFor[StatusResponse](), "MergeInfo": reflect.TypeFor[MergeInfo](),
		"GossipStats": reflect.TypeFor[GossipStats](), "TrustStats": reflect.TypeFor[TrustStats](),
		"RunStatus": reflect.TypeFor[RunStatus](), "Alone": reflect.TypeFor[Alone](),
		"Reachability": reflect.TypeFor[Reachability](), "RelayService": reflect.TypeFor[RelayService](),
		"PeerStatus": reflect.TypeFor[PeerStatus](), "Point": reflect.TypeFor[Point](),
		"CheckpointInfo": reflect.TypeFor[CheckpointInfo](), "Error": reflect.TypeFor[ErrorResponse](),
		"Health": reflect.TypeFor[HealthResponse](),
	} {
		var fields, declared []string
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			fields = append(fields, name)
		}
		for k := range spec.Components.Schemas[schema].Properties {
			declared = append(declared, k)
		}
		sort.Strings(fields)
		sort.Strings(declared)
		if strings.Join(fields, ",") != strings.Join(declared, ",") {
			t.Errorf("schema %s declares %v; api.%s has %v", schema, declared, typ.Name(), fields)
		}
	}
}

// optionalFields are declared in the spec but present only in some
// responses (a peer's banned_until only while it is banned).
var optionalFields = map[string]bool{"PeerStatus.banned_until": true, "Status.alone": true, "Status.trainer": true,
	"Status.reachability": true, "Reachability.relay_service": true, "PeerStatus.remote_addr": true,
	"PeerStatus.last_hole_punch": true}
