package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Server serves the REST API, /metrics and the dashboard for one Source.
//
// Every request runs on its own net/http goroutine and only reads the
// Source; the server owns no mutable state besides the model-download
// semaphore. A panic in a handler (or in the Source it calls) is logged
// and answered with 500; the node keeps running.
type Server struct {
	src     Source
	cfg     Config
	log     *slog.Logger
	reg     *prometheus.Registry
	mux     *http.ServeMux
	handler http.Handler
	srv     *http.Server
	models  chan struct{} // one token per /v1/model response being built

	shutdownOnce sync.Once
	shutdownErr  error
}

// New builds a server for src. It does not listen: call Serve.
func New(src Source, cfg Config) (*Server, error) {
	if src == nil {
		return nil, fmt.Errorf("%w: nil source", ErrBadConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{src: src, cfg: cfg, log: log.With("component", "api"), reg: prometheus.NewRegistry(),
		mux: http.NewServeMux(), models: make(chan struct{}, cfg.MaxModelDownloads)}
	s.reg.MustRegister(
		newCollector(src, s.log),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	s.routes()
	s.handler = s.secure(s.recover(s.limitQuery(http.HandlerFunc(s.route))))
	s.srv = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		// Connection-level errors (bad TLS, resets) are the client's doing:
		// debug level, so a remote cannot fill the log at warn.
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	return s, nil
}

func (s *Server) routes() {
	metrics := promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{
		ErrorLog:            promLogger{s.log},
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: s.cfg.MaxMetricsScrapes,
	})
	s.mux.HandleFunc("GET /v1/status", s.status)
	s.mux.HandleFunc("GET /v1/peers", s.peers)
	s.mux.HandleFunc("GET /v1/history", s.history)
	s.mux.HandleFunc("GET /v1/model", s.model)
	s.mux.HandleFunc("GET /v1/checkpoints", s.checkpoints)
	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.Handle("GET /metrics", metrics)
	s.mux.HandleFunc("GET /{$}", s.dashboard)
	s.mux.HandleFunc("GET /assets/{file}", s.asset)
}

// Handler is the server's full handler chain, for tests and for embedding
// the API in another server.
func (s *Server) Handler() http.Handler { return s.handler }

// Registry is the server's own Prometheus registry (never the global one),
// so other components can add collectors before Serve.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Serve answers requests on l until Shutdown; it then returns nil. Any
// other return is an error accepting connections.
func (s *Server) Serve(l net.Listener) error {
	err := s.srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("api: serve %s: %w", l.Addr(), err)
}

// Shutdown stops accepting connections and waits for requests in flight
// until ctx ends, then closes what is left. Safe to call more than once;
// later calls return the first call's result.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdownOnce.Do(func() {
		if err := s.srv.Shutdown(ctx); err != nil {
			// Requests still running past the deadline: cut them off so the
			// node's exit does not wait for a slow client.
			_ = s.srv.Close()
			s.shutdownErr = fmt.Errorf("api: shutdown: %w", err)
		}
	})
	return s.shutdownErr
}

// Listen opens a TCP listener on addr (see CheckAddr).
func Listen(addr string) (net.Listener, error) {
	if _, err := CheckAddr(addr); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("api: listen on %s: %w", addr, err)
	}
	return l, nil
}

// route dispatches to the mux but answers unknown paths and wrong methods
// itself, with the same status (and Allow header) as the mux and a JSON body.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	h, pattern := s.mux.Handler(r)
	if pattern != "" {
		s.mux.ServeHTTP(w, r)
		return
	}
	probe := &headerProbe{header: http.Header{}}
	h.ServeHTTP(probe, r)
	if allow := probe.header.Get("Allow"); allow != "" {
		w.Header().Set("Allow", allow)
	}
	switch probe.status {
	case http.StatusMethodNotAllowed:
		s.writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s (allowed: %s)",
			r.Method, r.URL.Path, probe.header.Get("Allow")))
	default:
		s.writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint: %s", r.URL.Path))
	}
}

// headerProbe records what the mux's own not-found and not-allowed
// handlers would send, without sending it.
type headerProbe struct {
	header http.Header
	status int
}

func (p *headerProbe) Header() http.Header         { return p.header }
func (p *headerProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *headerProbe) WriteHeader(code int) {
	if p.status == 0 {
		p.status = code
	}
}

// limitQuery answers 414 to query strings over MaxQueryBytes; the header
// limit alone would let one through at up to MaxHeaderBytes.
func (s *Server) limitQuery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.URL.RawQuery) > s.cfg.MaxQueryBytes {
			s.writeError(w, http.StatusRequestURITooLong,
				fmt.Sprintf("query string of %d bytes: the limit is %d", len(r.URL.RawQuery), s.cfg.MaxQueryBytes))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// secure sets headers that keep the dashboard from being framed or fed
// foreign scripts: it loads nothing but its own assets and API.
func (s *Server) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		next.ServeHTTP(w, r)
	})
}

// recover turns a panic in a handler into a logged error and a 500, so no
// request can take the node down. http.ErrAbortHandler keeps its meaning
// (abort the response quietly).
func (s *Server) recover(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tw := &trackingWriter{ResponseWriter: w}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("handler panicked", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v),
				"stack", string(debug.Stack()))
			if tw.wrote {
				// Too late for a status: drop the connection so the client
				// sees a broken response rather than a truncated success.
				panic(http.ErrAbortHandler)
			}
			s.writeError(w, http.StatusInternalServerError, "internal error")
		}()
		next.ServeHTTP(tw, r)
	})
}

// trackingWriter notes whether the response has started.
type trackingWriter struct {
	http.ResponseWriter
	wrote bool
}

func (t *trackingWriter) WriteHeader(code int) {
	t.wrote = true
	t.ResponseWriter.WriteHeader(code)
}

func (t *trackingWriter) Write(b []byte) (int, error) {
	t.wrote = true
	return t.ResponseWriter.Write(b)
}

// Flush sends what is buffered; the response has then started.
func (t *trackingWriter) Flush() {
	t.wrote = true
	_ = http.NewResponseController(t.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection's flusher and
// deadlines (promhttp uses them).
func (t *trackingWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// promLogger routes promhttp's error log to slog.
type promLogger struct{ log *slog.Logger }

func (p promLogger) Println(v ...any) { p.log.Warn("metrics", "err", fmt.Sprint(v...)) }
