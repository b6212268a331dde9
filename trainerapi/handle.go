package trainerapi

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"math"
	"strconv"

	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/params"
)

// handle runs one request. A refusal is an *apiError, with the request's
// payload already skipped (the connection goes on); any other error is a
// broken stream.
func (ss *session) handle(raw rawRequest, payload uint64) (map[string]any, [][]float32, error) {
	op := opOf(raw)
	refuse := func(code, format string, a ...any) (map[string]any, [][]float32, error) {
		if err := discard(ss.r, payload); err != nil {
			return nil, nil, err
		}
		return nil, nil, refusal(code, format, a...)
	}
	decode := func(v any) error {
		d := json.NewDecoder(bytes.NewReader(raw))
		return d.Decode(v)
	}
	if !ss.hello && op != "hello" {
		return refuse(CodeBadRequest, "say hello first (got op %q)", op)
	}
	if op != "push" && payload > 0 {
		return refuse(CodeBadRequest, "op %q takes no payload (got %d bytes)", op, payload)
	}
	switch op {
	case "hello":
		var h helloReq
		if err := decode(&h); err != nil {
			return refuse(CodeBadRequest, "hello: %v", err)
		}
		if h.Version != Version {
			return refuse(CodeBadVersion, "protocol version %d: this node speaks version %d", h.Version, Version)
		}
		if ss.s.token != "" && subtle.ConstantTimeCompare([]byte(h.Token), []byte(ss.s.token)) != 1 {
			return refuse(CodeUnauthorized, "wrong or missing token: over TCP, send the token the node wrote to its token file")
		}
		ss.hello = true
		return map[string]any{"version": Version, "node": "meshtrain " + node.Version(), "ops": Ops}, nil, nil
	case "register":
		var spec Spec
		if err := decode(&spec); err != nil {
			return refuse(CodeBadRequest, "register: %v", err)
		}
		if _, _, err := spec.layouts(); err != nil {
			return refuse(CodeBadRequest, "register: %v", err)
		}
		return ss.register(spec)
	case "bye":
		// Released before the reply, so a trainer that starts right
		// after the bye is answered registers at once.
		ss.release()
		return map[string]any{}, nil, nil
	}
	if ss.ext == nil {
		return refuse(CodeNotRegistered, "op %q needs a registration first", op)
	}
	e := ss.ext
	switch op {
	case "push":
		var p pushReq
		if err := decode(&p); err != nil {
			return refuse(CodeBadRequest, "push: %v", err)
		}
		want := uint64(4 * len(e.w))
		if p.Optimizer {
			want += 4 * uint64(e.optLen)
		}
		if payload != want {
			return refuse(CodeBadShape, "push payload of %d bytes: the registered model is %d float32s%s (%d bytes)",
				payload, len(e.w), optNote(p.Optimizer, e.optLen), want)
		}
		if p.Samples < 0 || p.Steps < 0 || p.Samples > 1<<40 || p.Steps > 1<<40 {
			return refuse(CodeBadRequest, "push: samples %d and steps %d must be >= 0", p.Samples, p.Steps)
		}
		if bad(p.Loss) || bad(p.LR) {
			return refuse(CodeBadRequest, "push: loss and lr must be finite")
		}
		ss.in = grow(ss.in, len(e.w))
		if err := readFloats(ss.r, ss.in); err != nil {
			return nil, nil, err
		}
		var opt []float32
		if p.Optimizer {
			ss.optIn = grow(ss.optIn, e.optLen)
			if err := readFloats(ss.r, ss.optIn); err != nil {
				return nil, nil, err
			}
			opt = ss.optIn
		}
		if i := firstNonFinite(ss.in); i >= 0 {
			return nil, nil, refusal(CodeNonFinite, "model value %d (tensor %s) is %v: nothing was applied", i, tensorAt(e.layout, i), ss.in[i])
		}
		if i := firstNonFinite(opt); i >= 0 {
			return nil, nil, refusal(CodeNonFinite, "optimizer value %d is %v: nothing was applied", i, opt[i])
		}
		ss.out = grow(ss.out, len(e.w))
		merged, run := e.push(ss.in, opt, ss.out, pushIn{samples: p.Samples, steps: p.Steps, loss: p.Loss, lr: p.LR})
		e.mu.Lock()
		merges := e.merges
		e.mu.Unlock()
		reply := map[string]any{"delta": merged, "merges": merges, "run": run}
		if merged {
			return reply, [][]float32{ss.out}, nil
		}
		return reply, nil, nil
	case "pull":
		ss.out = grow(ss.out, len(e.w))
		ss.optOut = grow(ss.optOut, e.optLen)
		step, samples, hasOpt, run, err := e.pull(ss.out, ss.optOut)
		if err != nil {
			return refuse(CodeBadRequest, "%v", err)
		}
		reply := map[string]any{"step": step, "samples": samples, "optimizer": hasOpt, "run": run}
		if hasOpt {
			return reply, [][]float32{ss.out, ss.optOut}, nil
		}
		return reply, [][]float32{ss.out}, nil
	case "average":
		ss.out = grow(ss.out, len(e.w))
		step, samples, updates, averaged, err := e.average(ss.out)
		if err != nil {
			return refuse(CodeBadRequest, "%v", err)
		}
		return map[string]any{"step": step, "samples": samples, "averaged": averaged, "updates": updates},
			[][]float32{ss.out}, nil
	case "eval":
		var v evalReq
		if err := decode(&v); err != nil || v.Accuracy == nil {
			return refuse(CodeBadRequest, "eval needs accuracy (and loss)")
		}
		loss := 0.0
		if v.Loss != nil {
			loss = *v.Loss
		}
		if err := e.setScore(*v.Accuracy, loss); err != nil {
			return refuse(CodeBadRequest, "eval: %v", err)
		}
		return map[string]any{}, nil, nil
	}
	return refuse(CodeBadRequest, "unknown op %q", op)
}

// register binds the session to the node, one trainer at a time.
func (ss *session) register(spec Spec) (map[string]any, [][]float32, error) {
	s := ss.s
	s.regMu.Lock()
	defer s.regMu.Unlock()
	if s.holder != nil && s.holder != ss {
		return nil, nil, refusal(CodeBusy, "another trainer is registered with this node: one trainer per node (run a node per trainer)")
	}
	ctx := s.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	ext, err := s.cfg.Attach(ctx, spec)
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			return nil, nil, ae
		}
		return nil, nil, refusal(CodeMismatch, "%v", err)
	}
	s.holder, ss.ext = ss, ext
	ext.mu.Lock()
	ext.srv = s
	peerID := ext.peerID
	ext.mu.Unlock()
	ready, step, samples, run := ext.status()
	s.log.Info("trainer registered", "run", spec.Run, "tensors", len(spec.Tensors), "parameters", ext.layout.Size(),
		"optimizer_values", ext.optLen, "resume", ready)
	return map[string]any{"fingerprint": ext.fp.String(), "peer_id": peerID, "resume": ready, "step": step,
		"samples": samples, "run": run}, nil, nil
}

func optNote(withOpt bool, n int) string {
	if !withOpt {
		return ""
	}
	return " plus the optimizer's " + strconv.Itoa(n)
}

// opOf is a request header's op ("" when absent or not a string).
func opOf(raw rawRequest) string {
	var op struct {
		Op string `json:"op"`
	}
	_ = json.Unmarshal(raw, &op)
	return op.Op
}

func bad(v *float64) bool { return v != nil && (math.IsNaN(*v) || math.IsInf(*v, 0)) }

func grow(v []float32, n int) []float32 {
	if cap(v) < n {
		return make([]float32, n)
	}
	return v[:n]
}

// firstNonFinite is the index of v's first NaN or Inf (-1: none): an
// all-ones exponent, tested on the bits.
func firstNonFinite(v []float32) int {
	for i, x := range v {
		if math.Float32bits(x)&0x7f800000 == 0x7f800000 {
			return i
		}
	}
	return -1
}

// tensorAt names the tensor holding element i.
func tensorAt(l params.Layout, i int) string {
	for _, t := range l.Tensors() {
		if i >= t.Offset && i < t.Offset+t.Len() {
			return t.Name
		}
	}
	return "?"
}
