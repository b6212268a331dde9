package sim

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/train"
)

// report makes a point: the live models' average and their distance to
// it, the test accuracy of the average and of a sample of live nodes, and
// the traffic since the previous point.
func (s *simulation) report() error {
	s.tally()
	p := Point{
		T: s.now.Seconds(), Live: len(s.live), Samples: s.res.Samples, LostSamples: s.res.LostSamples,
		Merges: s.res.Merges, CatchUps: s.res.CatchUps, Exchanges: s.res.Exchanges, Failed: s.res.Failed,
		LR: s.cfg.LR * s.sched.Factor(params.Progress(s.res.Samples)),
	}
	if s.liveTime > 0 {
		p.BytesPerNodeS = (s.res.BytesSent - s.bytesAt) / s.liveTime
	}
	s.liveTime, s.bytesAt = 0, s.res.BytesSent
	if len(s.live) > 0 {
		avg := s.average(&p)
		r, err := train.Evaluate(s.model, avg, s.testSub, 0, s.cfg.Threads)
		if err != nil {
			return fmt.Errorf("sim: score the average model: %w", err)
		}
		p.AverageAccuracy = r.Accuracy
		k := min(s.cfg.EvalNodes, len(s.live))
		for _, i := range s.evalRng.Perm(len(s.live))[:k] {
			r, err := train.Evaluate(s.model, s.live[i].reported(), s.testSub, 0, s.cfg.Threads)
			if err != nil {
				return fmt.Errorf("sim: score node %d: %w", s.live[i].id, err)
			}
			p.Scored = append(p.Scored, NodeScore{Node: s.live[i].id, Accuracy: r.Accuracy})
			if p.NodesScored == 0 || r.Accuracy < p.NodeAccuracyMin {
				p.NodeAccuracyMin = r.Accuracy
			}
			p.NodeAccuracyMax = max(p.NodeAccuracyMax, r.Accuracy)
			p.NodeAccuracyMean += r.Accuracy
			p.NodesScored++
		}
		if p.NodesScored > 0 {
			p.NodeAccuracyMean /= float64(p.NodesScored)
		}
		slices.SortFunc(p.Scored, func(a, b NodeScore) int { return cmp.Compare(a.Node, b.Node) })
	}
	s.res.Points = append(s.res.Points, p)
	s.lastPoint, s.hasPoint = s.now, true
	if s.progress != nil {
		s.progress(p)
	}
	return nil
}

// average returns the live models' average (summed in float64 in live
// order, so the same run gives the same bits) and fills p's consensus
// distance and mean progress.
func (s *simulation) average(p *Point) []float32 {
	size := s.model.Size()
	sum := make([]float64, size)
	var prog float64
	for _, n := range s.live {
		for i, v := range n.w {
			sum[i] += float64(v)
		}
		prog += float64(n.progress)
	}
	k := float64(len(s.live))
	avg := make([]float32, size)
	for i := range sum {
		sum[i] /= k
		avg[i] = float32(sum[i])
	}
	var dist float64
	for _, n := range s.live {
		for i, v := range n.w {
			d := float64(v) - sum[i]
			dist += d * d
		}
	}
	p.ConsensusDistance = dist / k
	p.MeanProgress = prog / k
	return avg
}
