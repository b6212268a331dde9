package api

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"

	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/store"
)

// Response bodies of the list endpoints. A top-level object (not a bare
// array) leaves room for fields later without breaking clients.
type (
	// PeersResponse is the body of GET /v1/peers.
	PeersResponse struct {
		Peers []node.PeerStatus `json:"peers"`
	}
	// HistoryResponse is the body of GET /v1/history.
	HistoryResponse struct {
		Points []store.Point `json:"points"`
	}
	// CheckpointsResponse is the body of GET /v1/checkpoints.
	CheckpointsResponse struct {
		Checkpoints []store.Info `json:"checkpoints"`
	}
	// HealthResponse is the body of GET /healthz and GET /readyz.
	HealthResponse struct {
		Status string `json:"status"` // "ok" or "unavailable"
		// Reason says why the node is not ready; empty when it is.
		Reason string `json:"reason,omitempty"`
	}
	// ErrorResponse is the body of every 4xx and 5xx answer.
	ErrorResponse struct {
		Status int    `json:"status"`
		Error  string `json:"error"`
	}
)

// Model response headers, so a client can tell what it downloaded without
// parsing the file.
const (
	HeaderFingerprint = "X-Meshtrain-Fingerprint"
	HeaderStep        = "X-Meshtrain-Step"
	HeaderProgress    = "X-Meshtrain-Progress"
)

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, http.StatusOK, s.src.Status())
}

func (s *Server) peers(w http.ResponseWriter, r *http.Request) {
	p := s.src.Peers()
	if p == nil {
		p = []node.PeerStatus{}
	}
	s.writeJSON(w, http.StatusOK, PeersResponse{Peers: p})
}

func (s *Server) history(w http.ResponseWriter, r *http.Request) {
	n := 0 // everything the node keeps
	if vals, ok := r.URL.Query()["n"]; ok {
		v, err := strconv.Atoi(vals[0])
		if len(vals) != 1 || err != nil || v < 1 || v > s.cfg.MaxHistory {
			s.writeError(w, http.StatusBadRequest,
				fmt.Sprintf("n must be one integer in [1, %d], got %q", s.cfg.MaxHistory, vals))
			return
		}
		n = v
	}
	pts := s.src.History(n)
	if pts == nil {
		pts = []store.Point{}
	}
	s.writeJSON(w, http.StatusOK, HistoryResponse{Points: pts})
}

func (s *Server) model(w http.ResponseWriter, r *http.Request) {
	select {
	case s.models <- struct{}{}:
		defer func() { <-s.models }()
	default:
		w.Header().Set("Retry-After", "1")
		s.writeError(w, http.StatusServiceUnavailable, "too many model downloads in progress; retry shortly")
		return
	}
	snap, layout := s.src.Snapshot()
	model, dataset, network, seed := s.src.ModelMeta()
	// Built in memory first: a failure becomes a 500, not a 200 with a
	// truncated file, and the client gets a Content-Length.
	var buf bytes.Buffer
	buf.Grow(4*len(snap.Params) + 4096)
	if err := params.WriteSafetensors(&buf, layout, snap.Params, node.ModelMetadata(model, dataset, network, seed, snap)); err != nil {
		s.log.Error("model export failed", "err", err)
		s.writeError(w, http.StatusInternalServerError, "model export failed")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="meshtrain-%s-step%d.safetensors"`,
		snap.Fingerprint.Short(), snap.Step))
	h.Set("Cache-Control", "no-store")
	h.Set(HeaderFingerprint, snap.Fingerprint.String())
	h.Set(HeaderStep, strconv.FormatInt(snap.Step, 10))
	h.Set(HeaderProgress, strconv.FormatFloat(float64(snap.Progress), 'g', -1, 64))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = buf.WriteTo(w)
	}
}

func (s *Server) checkpoints(w http.ResponseWriter, r *http.Request) {
	l, err := s.src.Checkpoints()
	if err != nil {
		s.log.Error("listing checkpoints failed", "err", err)
		s.writeError(w, http.StatusInternalServerError, "listing checkpoints failed: "+err.Error())
		return
	}
	if l == nil {
		l = []store.Info{}
	}
	s.writeJSON(w, http.StatusOK, CheckpointsResponse{Checkpoints: l})
}

// healthz answers while the process can serve HTTP at all.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, http.StatusOK, HealthResponse{Status: "ok"})
}

// readyz answers 200 once the trainer has a step behind it and, unless the
// node is offline, its host listens; 503 with the reason otherwise.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if reason := notReady(s.src.Status()); reason != "" {
		s.writeJSON(w, http.StatusServiceUnavailable, HealthResponse{Status: "unavailable", Reason: reason})
		return
	}
	s.writeJSON(w, http.StatusOK, HealthResponse{Status: "ok"})
}

// Offline is the mode an offline node (meshtrain train) reports.
const Offline = "offline"

func notReady(st node.Status) string {
	switch {
	case st.Step <= 0:
		return "the trainer has not taken a step yet"
	case st.Mode != Offline && (st.PeerID == "" || len(st.Addrs) == 0):
		return "the mesh is not up: no peer ID or listen address yet"
	}
	return ""
}

func (s *Server) writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := marshal(v)
	if err != nil {
		s.log.Error("response not encodable", "err", err)
		s.writeError(w, http.StatusInternalServerError, "response not encodable")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

func (s *Server) writeError(w http.ResponseWriter, code int, msg string) {
	b, _ := marshal(ErrorResponse{Status: code, Error: msg})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Del("Content-Length")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}
