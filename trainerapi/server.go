package trainerapi

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
)

// AttachFunc binds a registration to the node: the first call builds the
// node around a new External and returns it; later calls (the trainer
// restarted) return the same External if spec equals its registration,
// or an error saying what differs. It is called with the server's
// registration lock held, one call at a time.
type AttachFunc func(ctx context.Context, spec Spec) (*External, error)

// Config is a server's listener and what it binds trainers to.
type Config struct {
	// Listen is "unix:PATH" or "tcp:HOST:PORT".
	Listen string
	// TokenFile: over TCP, the file the token is written to (mode 0600).
	TokenFile string
	Attach    AttachFunc
	Logger    *slog.Logger
}

// Server speaks the trainer API on one listener.
type Server struct {
	cfg   Config
	ln    net.Listener
	token string // "" over a Unix socket
	log   *slog.Logger
	path  string // the socket file to remove at Close

	regMu  sync.Mutex
	holder *session // the registered trainer

	rejMu      sync.Mutex
	rejections map[string]int64

	wg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc
	conns  sync.Map // *session -> struct{}
	closed atomic.Bool
}

// Listen opens the listener: a Unix socket of mode 0600 (an old socket
// file at the path is replaced), or TCP with a fresh token written to
// cfg.TokenFile.
func Listen(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: cfg.Logger.With("component", "trainerapi"), rejections: map[string]int64{}}
	kind, addr, ok := strings.Cut(cfg.Listen, ":")
	if !ok || addr == "" {
		return nil, fmt.Errorf("trainerapi: listen address %q: want unix:PATH or tcp:HOST:PORT", cfg.Listen)
	}
	switch kind {
	case "unix":
		if fi, err := os.Lstat(addr); err == nil {
			if fi.Mode()&os.ModeSocket == 0 {
				return nil, fmt.Errorf("trainerapi: %s exists and is not a socket", addr)
			}
			if c, err := net.Dial("unix", addr); err == nil {
				c.Close()
				return nil, fmt.Errorf("trainerapi: %s is in use by another node", addr)
			}
			_ = os.Remove(addr) // a stale socket of a node that died
		}
		if err := os.MkdirAll(filepath.Dir(addr), 0o700); err != nil {
			return nil, err
		}
		ln, err := net.Listen("unix", addr)
		if err != nil {
			return nil, fmt.Errorf("trainerapi: %w", err)
		}
		if err := os.Chmod(addr, 0o600); err != nil {
			ln.Close()
			return nil, err
		}
		s.ln, s.path = ln, addr
	case "tcp":
		if cfg.TokenFile == "" {
			return nil, errors.New("trainerapi: a TCP listener needs a token file")
		}
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		s.token = hex.EncodeToString(b)
		if err := os.WriteFile(cfg.TokenFile, []byte(s.token+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("trainerapi: token: %w", err)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("trainerapi: %w", err)
		}
		s.ln = ln
	default:
		return nil, fmt.Errorf("trainerapi: listen address %q: want unix:PATH or tcp:HOST:PORT", cfg.Listen)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is where the server listens ("unix:PATH" or "tcp:HOST:PORT").
func (s *Server) Addr() string {
	if s.path != "" {
		return "unix:" + s.path
	}
	return "tcp:" + s.ln.Addr().String()
}

// Connected reports whether a trainer is registered now.
func (s *Server) Connected() bool {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	return s.holder != nil
}

// Rejections counts the refused requests by code.
func (s *Server) Rejections() map[string]int64 {
	s.rejMu.Lock()
	defer s.rejMu.Unlock()
	out := make(map[string]int64, len(s.rejections))
	for k, v := range s.rejections {
		out[k] = v
	}
	return out
}

// Close stops listening and drops every connection.
func (s *Server) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.cancel()
	err := s.ln.Close()
	s.conns.Range(func(k, _ any) bool { k.(*session).c.Close(); return true })
	s.wg.Wait()
	if s.path != "" {
		_ = os.Remove(s.path)
	}
	return err
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if !s.closed.Load() {
				s.log.Error("trainer API stopped accepting", "err", err)
			}
			return
		}
		ss := &session{s: s, c: c, r: bufio.NewReaderSize(c, 1<<16), w: bufio.NewWriterSize(c, 1<<16)}
		s.conns.Store(ss, struct{}{})
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.conns.Delete(ss)
			ss.serve()
		}()
	}
}

// session is one connection.
type session struct {
	s      *Server
	c      net.Conn
	r      *bufio.Reader
	w      *bufio.Writer
	hello  bool
	ext    *External // set once registered
	in     []float32 // push payloads, reused
	out    []float32 // deltas and pulls, reused
	optIn  []float32
	optOut []float32
}

// rawRequest is a request header: its op, then the op's own fields.
type rawRequest = json.RawMessage

type (
	helloReq struct {
		Version int    `json:"version"`
		Token   string `json:"token"`
	}
	pushReq struct {
		Samples   int64    `json:"samples"`
		Steps     int64    `json:"steps"`
		Loss      *float64 `json:"loss"`
		LR        *float64 `json:"lr"`
		Optimizer bool     `json:"optimizer"`
	}
	evalReq struct {
		Accuracy *float64 `json:"accuracy"`
		Loss     *float64 `json:"loss"`
	}
)

func (ss *session) serve() {
	defer ss.c.Close()
	defer ss.release()
	for {
		var req rawRequest
		payload, err := readHeader(ss.r, ss.maxPayload(), &req)
		if err != nil {
			if errors.Is(err, ErrFrame) {
				ss.reject(refusal(CodeBadRequest, "%v", err))
			} else if !errors.Is(err, io.EOF) && !ss.s.closed.Load() {
				ss.s.log.Info("trainer connection lost", "err", err)
			}
			return
		}
		op := opOf(req)
		reply, vecs, err := ss.handle(req, payload)
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) {
				// The stream broke mid-payload: nothing was applied.
				ss.s.log.Warn("trainer connection lost mid-request: nothing applied", "op", op, "err", err)
				ss.count("transfer")
				return
			}
			if !ss.reject(ae) {
				return
			}
			if op == "bye" {
				return
			}
			continue
		}
		if err := ss.send(reply, vecs...); err != nil {
			return
		}
		if op == "bye" {
			return
		}
	}
}

// maxPayload is the largest payload a request may carry now: none before
// registration, then the model and the optimizer state.
func (ss *session) maxPayload() uint64 {
	if ss.ext == nil {
		return 0
	}
	return 4 * uint64(len(ss.ext.w)+ss.ext.optLen)
}

func (ss *session) send(hdr map[string]any, vecs ...[]float32) error {
	hdr["ok"] = true
	if err := writeFrame(ss.w, hdr, vecs...); err != nil {
		return err
	}
	return ss.w.Flush()
}

// reject answers a refused request and counts it; false when the
// connection is gone.
func (ss *session) reject(e *apiError) bool {
	ss.count(e.Code)
	ss.s.log.Warn("trainer request refused", "code", e.Code, "err", e.Msg)
	if err := writeFrame(ss.w, map[string]any{"ok": false, "code": e.Code, "error": e.Msg}); err != nil {
		return false
	}
	return ss.w.Flush() == nil
}

func (ss *session) count(code string) {
	ss.s.rejMu.Lock()
	ss.s.rejections[code]++
	ss.s.rejMu.Unlock()
}

// release ends the session's registration.
func (ss *session) release() {
	s := ss.s
	s.regMu.Lock()
	defer s.regMu.Unlock()
	if s.holder == ss {
		s.holder = nil
		s.log.Info("trainer left: the node keeps its model and waits for the next registration")
	}
}
