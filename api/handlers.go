package api

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"

	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/params"
)

// Model response headers, so a client can tell what it downloaded without
// parsing the file.
const (
	HeaderFingerprint = "X-Meshtrain-Fingerprint"
	HeaderStep        = "X-Meshtrain-Step"
	HeaderProgress    = "X-Meshtrain-Progress"
)

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, http.StatusOK, statusFrom(s.src.Status()))
}

func (s *Server) peers(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, http.StatusOK, PeersResponse{Peers: listFrom(s.src.Peers(), peerFrom)})
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
	s.writeJSON(w, http.StatusOK, HistoryResponse{Points: listFrom(s.src.History(n), pointFrom)})
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
	s.writeJSON(w, http.StatusOK, CheckpointsResponse{Checkpoints: listFrom(l, checkpointFrom)})
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
