package api

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"
)

// DefaultAddr is where `meshtrain node` serves the API unless told otherwise,
// and where `meshtrain status` looks for it.
const DefaultAddr = "127.0.0.1:8080"

// Config tunes the HTTP server. DefaultConfig fills every field; Validate
// reports every bad one at once.
type Config struct {
	// ReadHeaderTimeout bounds reading a request's headers, so a client that
	// trickles them (slowloris) cannot hold a connection open.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request. The API takes no bodies.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing one response, from the end of the request
	// headers. It must leave room for /v1/model on a slow link: 4 bytes per
	// parameter.
	WriteTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long.
	IdleTimeout time.Duration
	// MaxHeaderBytes caps the request line and headers together, in bytes;
	// larger requests get 431.
	MaxHeaderBytes int
	// MaxQueryBytes caps the raw query string, in bytes; longer ones get 414.
	MaxQueryBytes int
	// MaxHistory is the largest n /v1/history accepts.
	MaxHistory int
	// MaxModelDownloads is how many /v1/model responses may be built at
	// once; each holds a copy of the model in memory. More get 503.
	MaxModelDownloads int
	// MaxMetricsScrapes is how many /metrics requests may run at once;
	// more get 503.
	MaxMetricsScrapes int
	// Logger receives panics, failed responses and server errors
	// (component=api). Nil discards.
	Logger *slog.Logger
}

// DefaultConfig is the configuration `meshtrain node --api` uses.
func DefaultConfig() Config {
	return Config{
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      2 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		MaxQueryBytes:     1 << 10,
		MaxHistory:        100000,
		MaxModelDownloads: 2,
		MaxMetricsScrapes: 4,
	}
}

// Validate reports every bad field at once; each error wraps ErrBadConfig.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrBadConfig}, a...)...))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"read header timeout", c.ReadHeaderTimeout}, {"read timeout", c.ReadTimeout},
		{"write timeout", c.WriteTimeout}, {"idle timeout", c.IdleTimeout},
	} {
		if d.v <= 0 {
			bad("%s %v: must be > 0", d.name, d.v)
		}
	}
	if c.MaxHeaderBytes < 1<<10 || c.MaxHeaderBytes > 1<<20 {
		bad("max header bytes %d: must be in [1024, 1048576]", c.MaxHeaderBytes)
	}
	if c.MaxQueryBytes < 16 || c.MaxQueryBytes > c.MaxHeaderBytes {
		bad("max query bytes %d: must be in [16, max header bytes]", c.MaxQueryBytes)
	}
	if c.MaxHistory < 1 {
		bad("max history %d: must be >= 1", c.MaxHistory)
	}
	if c.MaxModelDownloads < 1 {
		bad("max model downloads %d: must be >= 1", c.MaxModelDownloads)
	}
	if c.MaxMetricsScrapes < 1 {
		bad("max metrics scrapes %d: must be >= 1", c.MaxMetricsScrapes)
	}
	return errors.Join(errs...)
}

// CheckAddr validates a listen address (host:port, port 0-65535; an empty
// host means every interface) and reports whether it is reachable from
// this machine only.
func CheckAddr(addr string) (loopback bool, err error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("%w: %q: want host:port, e.g. %s", ErrBadAddr, addr, DefaultAddr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return false, fmt.Errorf("%w: %q: port %q is not a number in 0-65535", ErrBadAddr, addr, port)
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}
