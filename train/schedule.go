package train

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/meshtrain/meshtrain/params"
)

// Schedule maps training progress (samples, params.Progress) to a learning
// rate factor. It is driven by progress rather than by step count because a
// merge changes a model's progress: a node that mixes in a fresher model
// moves along the schedule with it.
type Schedule struct {
	// Kind is "const" or "cosine".
	Kind string
	// Warmup is the number of samples over which the rate rises linearly
	// from near zero to the base rate (0: no warmup).
	Warmup float64
	// Total is the progress, in samples, at which cosine decay reaches zero.
	// 0 lets the trainer use epochs × shard size.
	Total float64
	// WarmupFrac, when > 0, sets Warmup to this fraction of Total once the
	// total is known ("warmup=4%"), so one schedule fits any dataset size.
	WarmupFrac float64
}

// ParseSchedule reads KIND[:key=value,...] with KIND "const" or "cosine"
// and keys warmup and total, both in samples: "const", "cosine",
// "cosine:warmup=3200", "cosine:warmup=3200,total=180000". A warmup ending
// in % is a share of the total: "cosine:warmup=4%".
func ParseSchedule(s string) (Schedule, error) {
	kind, opts, hasOpts := strings.Cut(s, ":")
	if kind != "const" && kind != "cosine" {
		return Schedule{}, fmt.Errorf("%w: %q: kind must be \"const\" or \"cosine\"", ErrBadSchedule, s)
	}
	sc := Schedule{Kind: kind}
	if hasOpts {
		seen := map[string]bool{}
		for _, kv := range strings.Split(opts, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || seen[k] {
				return Schedule{}, fmt.Errorf("%w: %q: option %q is not key=value or repeats a key", ErrBadSchedule, s, kv)
			}
			seen[k] = true
			if pct, isPct := strings.CutSuffix(v, "%"); isPct && k == "warmup" {
				f, err := strconv.ParseFloat(pct, 64)
				if err != nil || !(f > 0 && f < 100) {
					return Schedule{}, fmt.Errorf("%w: %q: warmup=%q must be a percentage in (0,100)", ErrBadSchedule, s, v)
				}
				sc.WarmupFrac = f / 100
				continue
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 || f > 1e15 || math.IsNaN(f) {
				return Schedule{}, fmt.Errorf("%w: %q: %s=%q must be a number of samples >= 0", ErrBadSchedule, s, k, v)
			}
			switch k {
			case "warmup":
				sc.Warmup = f
			case "total":
				sc.Total = f
			default:
				return Schedule{}, fmt.Errorf("%w: %q: unknown option %q (want warmup or total)", ErrBadSchedule, s, k)
			}
		}
	}
	if err := sc.Validate(); err != nil {
		return Schedule{}, err
	}
	return sc, nil
}

// Validate checks the fields; a zero Total is allowed (filled in later).
func (s Schedule) Validate() error {
	switch {
	case s.Kind != "const" && s.Kind != "cosine":
		return fmt.Errorf("%w: kind %q must be \"const\" or \"cosine\"", ErrBadSchedule, s.Kind)
	case !(s.Warmup >= 0) || !(s.Total >= 0) || math.IsInf(s.Warmup, 0) || math.IsInf(s.Total, 0):
		return fmt.Errorf("%w: warmup %v and total %v must be finite and >= 0", ErrBadSchedule, s.Warmup, s.Total)
	case s.Kind == "cosine" && s.Total != 0 && s.Total <= s.Warmup:
		return fmt.Errorf("%w: cosine total %v must exceed warmup %v", ErrBadSchedule, s.Total, s.Warmup)
	}
	return nil
}

// String is the form ParseSchedule reads.
func (s Schedule) String() string {
	var opts []string
	if s.WarmupFrac > 0 {
		opts = append(opts, "warmup="+strconv.FormatFloat(100*s.WarmupFrac, 'g', -1, 64)+"%")
	} else if s.Warmup > 0 {
		opts = append(opts, "warmup="+strconv.FormatFloat(s.Warmup, 'g', -1, 64))
	}
	if s.Total > 0 {
		opts = append(opts, "total="+strconv.FormatFloat(s.Total, 'g', -1, 64))
	}
	if len(opts) == 0 {
		return s.Kind
	}
	return s.Kind + ":" + strings.Join(opts, ",")
}

// Resolve fills Total (if zero) with total and turns WarmupFrac into
// samples. It fails when the warmup would not end before the total.
func (s Schedule) Resolve(total float64) (Schedule, error) {
	if s.Total == 0 {
		s.Total = total
	}
	if s.WarmupFrac > 0 {
		if s.Total <= 0 {
			return s, fmt.Errorf("%w: warmup=%v%% needs a total (epochs > 0 or total=N)", ErrBadSchedule, 100*s.WarmupFrac)
		}
		s.Warmup = s.WarmupFrac * s.Total
	}
	if s.Kind == "cosine" && s.Total <= s.Warmup {
		return s, fmt.Errorf("%w: warmup %v reaches past the total of %v samples", ErrBadSchedule, s.Warmup, s.Total)
	}
	return s, nil
}

// Factor is the multiplier of the base learning rate at progress p. The
// trainer evaluates it at the progress a step reaches (start + batch), so
// the first step of a warmup is not wasted at a zero rate.
func (s Schedule) Factor(p params.Progress) float64 {
	x := float64(p)
	if s.Warmup > 0 && x < s.Warmup {
		return max(x, 0) / s.Warmup
	}
	if s.Kind != "cosine" || s.Total <= s.Warmup {
		return 1
	}
	t := min((x-s.Warmup)/(s.Total-s.Warmup), 1)
	return 0.5 * (1 + math.Cos(math.Pi*t))
}
