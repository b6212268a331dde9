package testnet

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// modeColors keeps one colour per mode across every plot.
var modeColors = map[string]color.Color{
	ModeGossip:      color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	ModeGossipConst: color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	ModeSync:        color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	ModeDiloco:      color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	ModeDilocoSpeed: color.RGBA{R: 0xe3, G: 0x77, B: 0xc2, A: 0xff},
	ModeLocal:       color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
}

// extraColors are for modes modeColors does not name, in AllModes order.
var extraColors = []color.Color{
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
	color.RGBA{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff},
	color.RGBA{R: 0xbc, G: 0xbd, B: 0x22, A: 0xff},
}

// modeColor is a mode's colour: its own, or one of extraColors by its
// place among the modes without one, so a mode added to AllModes is drawn
// too.
func modeColor(mode string) color.Color {
	if c, ok := modeColors[mode]; ok {
		return c
	}
	k := 0
	for _, m := range AllModes {
		if m == mode {
			break
		}
		if _, ok := modeColors[m]; !ok {
			k++
		}
	}
	return extraColors[k%len(extraColors)]
}

// AccuracyCurve is a mode's accuracy over wall time: at each time, the
// median over seeds of the nodes' mean accuracy (Mean) and of the worst
// node's (Worst).
type AccuracyCurve struct {
	T, Mean, Worst []float64
}

// Curve samples a mode's runs every step seconds from 0 to end.
func Curve(runs []Run, mode string, end, step float64) AccuracyCurve {
	var c AccuracyCurve
	if step <= 0 || end <= 0 {
		return c
	}
	for t := 0.0; t <= end+1e-9; t += step {
		var means, worsts []float64
		for _, r := range runs {
			if r.Mode != mode || r.Error != "" || len(r.Traces) == 0 {
				continue
			}
			var sum float64
			worst := math.Inf(1)
			for _, tr := range r.Traces {
				a := AccuracyAt(tr.Points, t)
				sum += a
				worst = min(worst, a)
			}
			means = append(means, sum/float64(len(r.Traces)))
			worsts = append(worsts, worst)
		}
		if len(means) == 0 {
			continue
		}
		c.T = append(c.T, t)
		c.Mean = append(c.Mean, Median(means))
		c.Worst = append(c.Worst, Median(worsts))
	}
	return c
}

func xys(x, y []float64) plotter.XYs {
	out := make(plotter.XYs, len(x))
	for i := range x {
		out[i].X, out[i].Y = x[i], y[i]
	}
	return out
}

// hline is a dotted horizontal line across [x0, x1].
func hline(y, x0, x1 float64, c color.Color) (*plotter.Line, error) {
	l, err := plotter.NewLine(plotter.XYs{{X: x0, Y: y}, {X: x1, Y: y}})
	if err != nil {
		return nil, err
	}
	l.Color = c
	l.Dashes = []vg.Length{vg.Points(2), vg.Points(3)}
	return l, nil
}

// faded is c at half opacity.
func faded(c color.Color) color.Color {
	r, g, b, _ := c.RGBA()
	return color.NRGBA{R: uint8(r >> 8), G: uint8(g >> 8), B: uint8(b >> 8), A: 0x80}
}

// onNetwork names a network other than loopback for a plot's title.
func onNetwork(r *Results) string {
	if r.Network.Name == "" || r.Network.Name == NetLoopback {
		return ""
	}
	return ", on " + r.Network.Name
}

// plotEnd is where the accuracy plot ends: the last report run's end, W at
// least (a node that ended holds its final model up to there).
func plotEnd(r *Results) float64 {
	end := r.Settings.FixedWallS
	for _, run := range r.Runs {
		if run.Error == "" {
			end = max(end, run.WallS)
		}
	}
	return end
}

// PlotAccuracy draws accuracy vs wall time per mode (solid: the nodes'
// mean, dashed: the worst node), zoomed on the approach to the target, on
// a log time axis so the first seconds, where the modes part, are legible.
func PlotAccuracy(r *Results, path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Test accuracy vs wall time (%d nodes at %s, median of %d seed(s)%s)",
		r.Settings.Nodes, joinG(r.Settings.Slowdowns), len(r.Settings.Seeds), onNetwork(r))
	p.X.Label.Text = "wall time since the common start (s, log scale)"
	p.Y.Label.Text = "test accuracy"
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.YPosition = draw.PosBottom
	target := r.Settings.Target
	end := plotEnd(r)
	for _, mode := range r.Settings.Modes {
		c := Curve(r.Runs, mode, end, r.Settings.SnapshotS)
		if len(c.T) > 0 && c.T[0] == 0 {
			// A log axis has no 0; the start is the first snapshot after it.
			c.T, c.Mean, c.Worst = c.T[1:], c.Mean[1:], c.Worst[1:]
		}
		if len(c.T) == 0 {
			continue
		}
		mean, err := plotter.NewLine(xys(c.T, c.Mean))
		if err != nil {
			return err
		}
		mean.Color, mean.Width = modeColor(mode), vg.Points(1.5)
		worst, err := plotter.NewLine(xys(c.T, c.Worst))
		if err != nil {
			return err
		}
		worst.Color, worst.Width = faded(modeColor(mode)), vg.Points(0.8)
		worst.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		p.Add(mean, worst)
		p.Legend.Add(mode+" (mean of nodes)", mean)
		p.Legend.Add(mode+" (worst node)", worst)
	}
	x0 := r.Settings.SnapshotS
	t, err := hline(target, x0, end, color.Black)
	if err != nil {
		return err
	}
	p.Add(t)
	p.Legend.Add(fmt.Sprintf("target %.1f%%", 100*target), t)
	p.Add(plotter.NewGrid())
	// Add widens the axes to the data; zoom on the approach to the target
	// afterwards (lines are clipped to the axes).
	p.Y.Min, p.Y.Max = math.Max(0, target-0.08), 1
	p.X.Min, p.X.Max = x0, end
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	return p.Save(9*vg.Inch, 5.5*vg.Inch, path)
}

// PlotConsensus draws each mode's consensus distance vs wall time (the
// median over seeds, see ConsensusCurve), on PlotAccuracy's log time axis
// and a log distance axis (a zero distance, identical models, has no place
// on it: the line breaks there; the axis is linear when every distance is
// zero). It writes nothing when no run has a consensus series (results from
// before it was measured).
func PlotConsensus(r *Results, path string) error {
	type curve struct {
		mode string
		t, d []float64
	}
	end, x0 := plotEnd(r), r.Settings.SnapshotS
	var curves []curve
	lo, hi := math.Inf(1), 0.0
	for _, mode := range r.Settings.Modes {
		t, d := ConsensusCurve(r.Runs, mode, end, r.Settings.SnapshotS)
		if len(t) > 0 && t[0] == 0 {
			t, d = t[1:], d[1:] // a log axis has no 0
		}
		if len(t) == 0 {
			continue
		}
		curves = append(curves, curve{mode: mode, t: t, d: d})
		for _, v := range d {
			if v > 0 {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	if len(curves) == 0 {
		return nil
	}
	logY := hi > 0
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Consensus distance (mean squared distance of the models to their average) vs wall time\n"+
		"(%d nodes at %s, median of %d seed(s)%s)",
		r.Settings.Nodes, joinG(r.Settings.Slowdowns), len(r.Settings.Seeds), onNetwork(r))
	p.X.Label.Text = "wall time since the common start (s, log scale)"
	p.Y.Label.Text = "consensus distance"
	if logY {
		p.Y.Label.Text += " (log scale)"
	}
	p.Legend.Top = true
	for _, c := range curves {
		var lines []plotter.XYs
		var seg plotter.XYs
		for k, t := range c.t {
			if logY && !(c.d[k] > 0) {
				if len(seg) > 0 {
					lines, seg = append(lines, seg), nil
				}
				continue
			}
			seg = append(seg, plotter.XY{X: t, Y: c.d[k]})
		}
		if len(seg) > 0 {
			lines = append(lines, seg)
		}
		label := c.mode
		if len(lines) == 0 {
			// Not drawn, but named: every model of the mode was identical.
			lines, label = []plotter.XYs{xys(c.t, c.d)}, c.mode+" (0 throughout)"
		}
		for k, xy := range lines {
			l, err := plotter.NewLine(xy)
			if err != nil {
				return err
			}
			l.Color, l.Width = modeColor(c.mode), vg.Points(1.5)
			if k == 0 {
				p.Legend.Add(label, l)
			}
			if label != c.mode {
				break
			}
			p.Add(l)
		}
	}
	p.Add(plotter.NewGrid())
	p.X.Min, p.X.Max = x0, end
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	if logY {
		// Whole decades, so the axis has labelled ticks, and one more on top
		// for the legend.
		p.Y.Min, p.Y.Max = math.Pow(10, math.Floor(math.Log10(lo))), 10*math.Pow(10, math.Ceil(math.Log10(hi)))
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	} else {
		p.Y.Min, p.Y.Max = 0, 1
	}
	return p.Save(9*vg.Inch, 5.5*vg.Inch, path)
}

// PlotBusy draws the busy fraction of every node in every mode (medians
// over seeds), grouped by node.
func PlotBusy(r *Results, path string) error {
	p := plot.New()
	p.Title.Text = "Busy fraction per node (computing or emulating slower hardware, not waiting)" + onNetwork(r)
	p.Y.Label.Text = "busy fraction"
	modes := 0
	for _, mode := range r.Settings.Modes {
		if r.Summary[mode] != nil && len(r.Summary[mode].BusyFraction) > 0 {
			modes++
		}
	}
	w := vg.Points(60 / float64(max(modes, 1)))
	k := 0
	for _, mode := range r.Settings.Modes {
		s := r.Summary[mode]
		if s == nil || len(s.BusyFraction) == 0 {
			continue
		}
		bars, err := plotter.NewBarChart(plotter.Values(s.BusyFraction), w)
		if err != nil {
			return err
		}
		bars.Color = modeColor(mode)
		bars.LineStyle.Width = 0
		bars.Offset = w * vg.Length(float64(k)-float64(modes-1)/2)
		p.Add(bars)
		p.Legend.Add(mode, bars)
		k++
	}
	names := make([]string, r.Settings.Nodes)
	for i := range names {
		sd := 1.0
		if i < len(r.Settings.Slowdowns) {
			sd = r.Settings.Slowdowns[i]
		}
		names[i] = fmt.Sprintf("node %d (%gx)", i, sd)
	}
	p.NominalX(names...)
	line, err := hline(0.97, -0.5, float64(r.Settings.Nodes)-0.5, color.Black)
	if err != nil {
		return err
	}
	p.Add(line)
	p.Legend.Add("0.97", line)
	p.Legend.Top = true
	// Room above the bars for the legend, with ticks only where a fraction
	// can be.
	p.Y.Min, p.Y.Max = 0, 1.35
	var ticks []plot.Tick
	for v := 0.0; v <= 1.0001; v += 0.2 {
		ticks = append(ticks, plot.Tick{Value: v, Label: fmt.Sprintf("%.1f", v)})
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	return p.Save(9*vg.Inch, 5*vg.Inch, path)
}

// PlotTimes draws each mode's median time to target (every node, and the
// first node) against the ideal.
func PlotTimes(r *Results, path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Time to %.1f%% test accuracy (median of %d seed(s)%s)", 100*r.Settings.Target, len(r.Settings.Seeds),
		onNetwork(r))
	p.Y.Label.Text = "seconds (missing bar: not reached)"
	var names []string
	var all, first plotter.Values
	for _, mode := range r.Settings.Modes {
		s := r.Summary[mode]
		if s == nil {
			continue
		}
		names = append(names, mode)
		all = append(all, zeroIfNil(s.TimeToTargetS))
		first = append(first, zeroIfNil(s.FirstNodeTimeS))
	}
	if len(names) == 0 {
		return nil
	}
	w := vg.Points(28)
	ab, err := plotter.NewBarChart(all, w)
	if err != nil {
		return err
	}
	ab.Color, ab.LineStyle.Width, ab.Offset = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, 0, -w/2
	fb, err := plotter.NewBarChart(first, w)
	if err != nil {
		return err
	}
	fb.Color, fb.LineStyle.Width, fb.Offset = color.RGBA{R: 0x9e, G: 0xc7, B: 0xe6, A: 0xff}, 0, w/2
	p.Add(ab, fb)
	p.Legend.Add("every node at target", ab)
	p.Legend.Add("first node at target", fb)
	if s := r.Summary[ModeSync]; s != nil && s.IdealTimeToTarget != nil {
		l, err := hline(*s.IdealTimeToTarget, -0.5, float64(len(names))-0.5, color.Black)
		if err != nil {
			return err
		}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("ideal %.2f s", *s.IdealTimeToTarget), l)
	}
	p.NominalX(names...)
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}

func zeroIfNil(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

// WritePlots writes one network's PNGs into dir: accuracy, busy fraction,
// time to target, and consensus distance when the runs recorded it; file
// names a plot's file.
func WritePlots(dir string, r *Results, file func(name string) string) error {
	for name, f := range map[string]func(*Results, string) error{
		AccuracyPlot: PlotAccuracy, BusyPlot: PlotBusy, TimePlot: PlotTimes, ConsensusPlot: PlotConsensus,
	} {
		if err := f(r, filepath.Join(dir, file(name))); err != nil {
			return fmt.Errorf("%w: plot %s: %w", ErrBench, name, err)
		}
	}
	return nil
}
