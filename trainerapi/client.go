package trainerapi

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
)

// Error is a request the node refused: its code and the node's sentence.
type Error struct {
	Code, Message string
}

func (e *Error) Error() string { return fmt.Sprintf("node refused (%s): %s", e.Code, e.Message) }

// Client is a trainer's side of the API, for trainers written in Go (the
// Python client in python/ is the same protocol). Not safe for concurrent
// use.
type Client struct {
	c    net.Conn
	r    *bufio.Reader
	w    *bufio.Writer
	last []float32 // the last reply's payload
	// node and ops are the hello reply's: the node's version and the ops
	// it serves (none listed by a node older than the list).
	node string
	ops  []string
}

// Dial connects to addr ("unix:PATH" or "tcp:HOST:PORT") and says hello.
func Dial(addr, token string) (*Client, error) {
	kind, path, ok := strings.Cut(addr, ":")
	if !ok || (kind != "unix" && kind != "tcp") {
		return nil, fmt.Errorf("trainerapi: address %q: want unix:PATH or tcp:HOST:PORT", addr)
	}
	c, err := net.Dial(kind, path)
	if err != nil {
		return nil, err
	}
	cl, err := hello(c, token)
	if err != nil {
		c.Close()
		return nil, err
	}
	return cl, nil
}

// hello opens a session on c.
func hello(c net.Conn, token string) (*Client, error) {
	cl := &Client{c: c, r: bufio.NewReaderSize(c, 1<<16), w: bufio.NewWriterSize(c, 1<<16)}
	raw, err := cl.call(map[string]any{"op": "hello", "version": Version, "token": token}, nil, nil)
	if err != nil {
		return nil, err
	}
	var h struct {
		Node string   `json:"node"`
		Ops  []string `json:"ops"`
	}
	_ = json.Unmarshal(raw, &h) // the node said ok: what it lists is optional
	cl.node, cl.ops = h.Node, h.Ops
	return cl, nil
}

// Supports reports whether the node listed op in its hello reply. A node
// older than the list lists none, and serves the ops of version 1 only.
func (c *Client) Supports(op string) bool { return slices.Contains(c.ops, op) }

// Registered is a registration's reply.
type Registered struct {
	Fingerprint string  `json:"fingerprint"`
	Resume      bool    `json:"resume"`
	Step        int64   `json:"step"`
	Samples     int64   `json:"samples"`
	Run         RunInfo `json:"run"`
}

// Register registers the trainer's model, optimizer state and run.
func (c *Client) Register(s Spec) (Registered, error) {
	if _, _, err := s.layouts(); err != nil {
		return Registered{}, err
	}
	hdr := map[string]any{"op": "register", "run": s.Run, "tensors": s.Tensors, "optimizer": s.Optimizer,
		"train_samples": s.TrainSamples, "batch": s.Batch, "holdout": s.Holdout}
	var r Registered
	raw, err := c.call(hdr, nil, nil)
	if err == nil {
		err = json.Unmarshal(raw, &r)
	}
	return r, err
}

// Pushed is a push's reply.
type Pushed struct {
	Delta  bool    `json:"delta"`
	Merges int64   `json:"merges"`
	Run    RunInfo `json:"run"`
}

// Push hands the node the model w (and the optimizer state opt, if not
// nil) with the samples and steps since the last push; when the reply has
// Delta, delta (the model's size) holds the merges to add to w.
func (c *Client) Push(w, opt []float32, samples, steps int64, loss float64, delta []float32) (Pushed, error) {
	hdr := map[string]any{"op": "push", "samples": samples, "steps": steps, "loss": loss, "optimizer": opt != nil}
	var p Pushed
	raw, err := c.call(hdr, [][]float32{w, opt}, func(n uint64) ([]float32, error) {
		if n != uint64(4*len(delta)) {
			return nil, fmt.Errorf("%w: delta of %d bytes for a model of %d values", ErrFrame, n, len(delta))
		}
		return delta, nil
	})
	if err == nil {
		err = json.Unmarshal(raw, &p)
	}
	return p, err
}

// Pull copies the node's model into w and its optimizer state into opt;
// it reports whether there was optimizer state.
func (c *Client) Pull(w, opt []float32) (hasOpt bool, err error) {
	raw, err := c.call(map[string]any{"op": "pull"}, nil, func(n uint64) ([]float32, error) {
		switch n {
		case uint64(4 * len(w)):
			return w, nil
		case uint64(4 * (len(w) + len(opt))):
			buf := make([]float32, len(w)+len(opt))
			return buf, nil
		}
		return nil, fmt.Errorf("%w: pull payload of %d bytes", ErrFrame, n)
	})
	if err != nil {
		return false, err
	}
	var r struct {
		Optimizer bool `json:"optimizer"`
	}
	_ = json.Unmarshal(raw, &r)
	if r.Optimizer {
		copy(w, c.last[:len(w)])
		copy(opt, c.last[len(w):])
	}
	return r.Optimizer, nil
}

// Average copies the model the node reports (the moving average of the
// pushed models and the merged ones, or the node's model when it keeps no
// average) into w; it reports whether it was an average. Against a node
// that did not list the op in its hello reply (an older one) it returns
// ErrUnsupported without asking.
func (c *Client) Average(w []float32) (averaged bool, err error) {
	if !c.Supports("average") {
		return false, fmt.Errorf("%w: average (the node, %s, is older than the op: upgrade it)", ErrUnsupported, cmp.Or(c.node, "unnamed"))
	}
	raw, err := c.call(map[string]any{"op": "average"}, nil, func(n uint64) ([]float32, error) {
		if n != uint64(4*len(w)) {
			return nil, fmt.Errorf("%w: average payload of %d bytes", ErrFrame, n)
		}
		return w, nil
	})
	if err != nil {
		return false, err
	}
	var r struct {
		Averaged bool `json:"averaged"`
	}
	_ = json.Unmarshal(raw, &r)
	return r.Averaged, nil
}

// Eval reports the trainer's own test score of its model.
func (c *Client) Eval(accuracy, loss float64) error {
	_, err := c.call(map[string]any{"op": "eval", "accuracy": accuracy, "loss": loss}, nil, nil)
	return err
}

// Close says bye and closes the connection.
func (c *Client) Close() error {
	_, err := c.call(map[string]any{"op": "bye"}, nil, nil)
	if cerr := c.c.Close(); err == nil {
		err = cerr
	}
	return err
}

// call sends one request and reads its reply; into chooses where the
// reply's payload goes (nil: the reply must have none).
func (c *Client) call(hdr map[string]any, vecs [][]float32, into func(n uint64) ([]float32, error)) (json.RawMessage, error) {
	if err := writeFrame(c.w, hdr, vecs...); err != nil {
		return nil, err
	}
	if err := c.w.Flush(); err != nil {
		return nil, err
	}
	var raw json.RawMessage
	n, err := readHeader(c.r, 1<<40, &raw)
	if err != nil {
		return nil, err
	}
	var status struct {
		OK    bool   `json:"ok"`
		Code  string `json:"code"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(raw, &status); err != nil {
		return nil, err
	}
	if !status.OK {
		return nil, &Error{Code: status.Code, Message: status.Error}
	}
	if n > 0 {
		if into == nil {
			return nil, errors.New("trainerapi: unexpected payload in the reply")
		}
		dst, err := into(n)
		if err != nil {
			return nil, err
		}
		if err := readFloats(c.r, dst); err != nil {
			return nil, err
		}
		c.last = dst
	}
	return raw, nil
}
