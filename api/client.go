package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// maxResponse bounds the JSON a client reads: a misdirected --api must not
// make the CLI buffer an arbitrary download.
const maxResponse = 32 << 20

// Client reads a node's REST API. Safe for concurrent use.
type Client struct {
	base *url.URL
	http *http.Client
}

// ParseBase turns what a user passes as --api (host:port, :port, or an
// http(s) URL, possibly with a path prefix) into the API's base URL.
func ParseBase(s string) (*url.URL, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("%w: empty API address", ErrBadAddr)
	}
	if !strings.Contains(s, "://") {
		if strings.HasPrefix(s, ":") {
			s = "127.0.0.1" + s
		}
		if _, _, err := net.SplitHostPort(s); err != nil {
			return nil, fmt.Errorf("%w: %q: want host:port or http://host:port", ErrBadAddr, s)
		}
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", ErrBadAddr, s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%w: %q: scheme must be http or https", ErrBadAddr, s)
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("%w: %q: no host", ErrBadAddr, s)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%w: %q: port %q is not a number in 1-65535", ErrBadAddr, s, p)
		}
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("%w: %q: no query, fragment or user info allowed", ErrBadAddr, s)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// NewClient returns a client for the API at addr (see ParseBase). A nil hc
// uses a client with a 10 s timeout.
func NewClient(addr string, hc *http.Client) (*Client, error) {
	u, err := ParseBase(addr)
	if err != nil {
		return nil, err
	}
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	return &Client{base: u, http: hc}, nil
}

// Base is the API's base URL.
func (c *Client) Base() string { return c.base.String() }

// Status fetches GET /v1/status.
func (c *Client) Status(ctx context.Context) (StatusResponse, error) {
	var s StatusResponse
	err := c.get(ctx, "/v1/status", &s)
	return s, err
}

// Peers fetches GET /v1/peers.
func (c *Client) Peers(ctx context.Context) ([]PeerStatus, error) {
	var r PeersResponse
	if err := c.get(ctx, "/v1/peers", &r); err != nil {
		return nil, err
	}
	return r.Peers, c.present(r.Peers != nil, "/v1/peers", "peers")
}

// History fetches GET /v1/history?n=n (everything the node keeps if n <= 0).
func (c *Client) History(ctx context.Context, n int) ([]Point, error) {
	p := "/v1/history"
	if n > 0 {
		p += "?n=" + strconv.Itoa(n)
	}
	var r HistoryResponse
	if err := c.get(ctx, p, &r); err != nil {
		return nil, err
	}
	return r.Points, c.present(r.Points != nil, p, "points")
}

// Checkpoints fetches GET /v1/checkpoints.
func (c *Client) Checkpoints(ctx context.Context) ([]CheckpointInfo, error) {
	var r CheckpointsResponse
	if err := c.get(ctx, "/v1/checkpoints", &r); err != nil {
		return nil, err
	}
	return r.Checkpoints, c.present(r.Checkpoints != nil, "/v1/checkpoints", "checkpoints")
}

// present rejects a list body without its list: the API sends [] for an
// empty one, so a missing or null list is an answer from something else.
func (c *Client) present(ok bool, path, field string) error {
	if ok {
		return nil
	}
	return fmt.Errorf("%w: %s%s: no %q list", ErrResponse, c.base, path, field)
}

// Raw fetches path and returns the body unparsed, for --json output that
// must show exactly what the node said.
func (c *Client) Raw(ctx context.Context, path string) ([]byte, error) {
	return c.do(ctx, path)
}

func (c *Client) get(ctx context.Context, path string, v any) error {
	b, err := c.do(ctx, path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %s%s: %v", ErrResponse, c.base, path, err)
	}
	return nil
}

func (c *Client) do(ctx context.Context, path string) ([]byte, error) {
	target := c.base.String() + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadAddr, target, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w at %s: %v", ErrUnreachable, c.base, unwrapURLError(err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return nil, fmt.Errorf("%w at %s: reading %s: %v", ErrUnreachable, c.base, path, err)
	}
	if len(b) > maxResponse {
		return nil, fmt.Errorf("%w: %s: body over %d bytes", ErrResponse, target, maxResponse)
	}
	if resp.StatusCode != http.StatusOK {
		var e ErrorResponse
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return nil, fmt.Errorf("%w: %s: %s: %s", ErrResponse, target, resp.Status, e.Error)
		}
		return nil, fmt.Errorf("%w: %s: %s (is this a meshtrain node API?)", ErrResponse, target, resp.Status)
	}
	return b, nil
}

// unwrapURLError drops net/url's "Get \"...\":" prefix; the caller names
// the address already.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
