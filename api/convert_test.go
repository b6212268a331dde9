package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/store"
)

// fill sets every exported field reachable from v (pointers allocated,
// slices and maps given two entries) to a distinct non-zero value.
func fill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(*n) + 0.25)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), n)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			fill(s.Index(i), n)
		}
		v.Set(s)
	case reflect.Array:
		for i := range v.Len() {
			fill(v.Index(i), n)
		}
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for range 2 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(k, n)
			fill(e, n)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(t0.Add(time.Duration(*n) * time.Millisecond)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), n)
			}
		}
	default:
		panic("fill: unhandled kind " + v.Kind().String())
	}
}

func filled[T any]() T {
	var v T
	n := 0
	fill(reflect.ValueOf(&v).Elem(), &n)
	return v
}

// TestConversionKeepsTheNodesEncoding: what the server sends is what the
// node's own values encode to, byte for byte, for values with every field
// set and for zero values (nil lists and maps stay null). A field added to
// node.Status, node.PeerStatus, store.Point or store.Info (or a type nested
// in them) fails this until api/types.go and api/convert.go mirror it.
func TestConversionKeepsTheNodesEncoding(t *testing.T) {
	same := func(name string, nodeValue, apiValue any) {
		t.Helper()
		want, err := json.Marshal(nodeValue)
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(apiValue)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the API's type encodes differently from the node's; mirror the node's fields in api/types.go "+
				"and api/convert.go\napi:  %s\nnode: %s", name, got, want)
		}
	}
	st := filled[node.Status]()
	same("filled node.Status", st, statusFrom(st))
	same("zero node.Status", node.Status{}, statusFrom(node.Status{}))
	p := filled[node.PeerStatus]()
	same("filled node.PeerStatus", p, peerFrom(p))
	same("zero node.PeerStatus", node.PeerStatus{}, peerFrom(node.PeerStatus{}))
	pt := filled[store.Point]()
	same("filled store.Point", pt, pointFrom(pt))
	same("zero store.Point", store.Point{}, pointFrom(store.Point{}))
	ck := filled[store.Info]()
	same("filled store.Info", ck, checkpointFrom(ck))
	same("zero store.Info", store.Info{}, checkpointFrom(store.Info{}))
}

func TestConversionCopies(t *testing.T) {
	st := filled[node.Status]()
	p := filled[node.PeerStatus]()
	a, ap := statusFrom(st), peerFrom(p)
	a.Addrs[0], a.PeerMerges["x"], a.LastMerge.Weight, a.Trust.Refused["x"] = "changed", 1, -1, 1
	a.LastCheckpoint.Step, a.Alone.SinceS = -1, -1
	for k := range a.Gossip.Rejected {
		a.Gossip.Rejected[k] = 1 << 40
	}
	*ap.Reputation, ap.Addrs[0], ap.Verdicts["x"] = -1, "changed", 1
	*ap.BannedUntil = time.Time{}
	if !reflect.DeepEqual(st, filled[node.Status]()) || !reflect.DeepEqual(p, filled[node.PeerStatus]()) {
		t.Fatal("changing the API's values changed the node's")
	}
}

// TestClientDecodesEveryRejectReason: the rejection counters reach a
// client under every reason's name, each with its own count.
func TestClientDecodesEveryRejectReason(t *testing.T) {
	f := newFake()
	var c gossip.Counters
	want := map[string]uint64{}
	for i, r := range gossip.Reasons() {
		for range i + 1 {
			c.Reject(r)
		}
		want[r.String()] = uint64(i + 1)
	}
	f.status.Gossip = c.Snapshot()
	s, _ := newServer(t, f)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	cl, err := NewClient(ts.URL, ts.Client())
	if err != nil {
		t.Fatal(err)
	}
	st, err := cl.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < 15 || !reflect.DeepEqual(st.Gossip.Rejected, want) {
		t.Fatalf("rejected %v, want %v", st.Gossip.Rejected, want)
	}
	if st.Gossip.BytesSent != f.status.Gossip.BytesSent || st.PeerID != fakePeer {
		t.Fatalf("status %+v", st)
	}
}

// TestClientTypesHoldEveryField: each golden body decodes into the
// client's type with no field unknown, and encodes back to the same JSON.
func TestClientTypesHoldEveryField(t *testing.T) {
	for name, v := range map[string]any{
		"status": &StatusResponse{}, "peers": &PeersResponse{}, "history": &HistoryResponse{},
		"checkpoints": &CheckpointsResponse{}, "healthz": &HealthResponse{}, "readyz": &HealthResponse{},
		"error_not_found": &ErrorResponse{}, "error_bad_n": &ErrorResponse{},
	} {
		s, _ := newServer(t, newFake())
		path := map[string]string{"status": "/v1/status", "peers": "/v1/peers", "history": "/v1/history",
			"checkpoints": "/v1/checkpoints", "healthz": "/healthz", "readyz": "/readyz",
			"error_not_found": "/v1/nope", "error_bad_n": "/v1/history?n=abc"}[name]
		body := serve(s, "GET", path).Body.Bytes()
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		back, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(back) + "\n"; got != string(body) {
			t.Errorf("%s: decoded and encoded again:\n%s\nserved:\n%s", name, strings.TrimSpace(got), body)
		}
	}
}
