package counter

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
)

// Result is what `gprofile stat` measured, ready to print. It holds no
// kernel state: the printers below are pure.
type Result struct {
	// Target names what was counted as perf stat's header does:
	// "'ls -l'", "process id '1234'" or "'system wide'".
	Target string
	// Names are the events, in the order given; Runs[r][i] is event i's
	// count in run r.
	Names []string
	// Canon are the canonical names of the events (cycles for
	// cpu-cycles, branch-instructions for branches), which choose the
	// shadow metric; nil means Names.
	Canon []string
	Runs  [][]Count
	// Elapsed is each run's wall time in seconds, from the command's
	// release to its exit (or of the -p / -a window).
	Elapsed []float64
	// User and Sys are the command's CPU time in seconds (getrusage of
	// the child). HaveRusage says they are known and printed, as perf
	// does for one run of a command.
	User, Sys  float64
	HaveRusage bool
}

// Scale returns c's value scaled to the whole time it was enabled, as
// perf does when the PMU multiplexed it (value * enabled / running), and
// the percentage of that time it ran. counted is false when it never ran
// (<not counted>).
func Scale(c Count) (value, pctRunning float64, counted bool) {
	if c.Running == 0 {
		return 0, 0, false
	}
	if c.Running >= c.Enabled {
		return float64(c.Value), 100, true
	}
	return float64(c.Value) * float64(c.Enabled) / float64(c.Running),
		100 * float64(c.Running) / float64(c.Enabled), true
}

// MeanStderr returns the mean of xs and the standard error of that mean,
// s/sqrt(n) with s the sample standard deviation (n-1), as perf's
// stddev_stats; the error is 0 for fewer than two values.
func MeanStderr(xs []float64) (mean, stderr float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss / float64(len(xs)-1) / float64(len(xs)))
}

// relPct is the standard error in percent of the mean (0 for a 0 mean).
func relPct(mean, stderr float64) float64 {
	if mean == 0 {
		return 0
	}
	return 100 * stderr / mean
}

// line is one event's printable state.
type line struct {
	name        string  // as given
	canon       string  // canonical, for the metric
	clock       bool    // task-clock or cpu-clock: ns, printed in msec
	mean, noise float64 // mean scaled count, and its standard error in %
	pct         float64 // % running of the last run
	running     uint64  // ns running of the last run, summed
	status      string  // "", "<not counted>" or "<not supported>"
	reason      string  // why not supported
	metric      float64
	metricUnit  string // "" when there is no shadow metric
	metricFmt   string
}

func isClock(name string) bool { return name == "task-clock" || name == "cpu-clock" }

// lines computes every event's mean, noise and shadow metric.
func (r *Result) lines() []line {
	ls := make([]line, len(r.Names))
	means := map[string]float64{}
	for i, name := range r.Names {
		canon := name
		if i < len(r.Canon) {
			canon = r.Canon[i]
		}
		l := line{name: name, canon: canon, clock: isClock(canon)}
		var vals []float64
		for _, run := range r.Runs {
			v, pct, ok := Scale(run[i])
			l.pct, l.running = pct, run[i].Running
			switch {
			case run[i].Unsupported != nil:
				l.status, l.reason = "<not supported>", run[i].Unsupported.Error()
			case !ok:
				l.status = "<not counted>"
			}
			vals = append(vals, v)
		}
		var se float64
		l.mean, se = MeanStderr(vals)
		l.noise = relPct(l.mean, se)
		if l.status == "" {
			means[canon] = l.mean
		}
		ls[i] = l
	}
	elapsed, _ := MeanStderr(r.Elapsed)
	for i := range ls {
		if ls[i].status == "" {
			ls[i].metric, ls[i].metricUnit, ls[i].metricFmt = shadow(ls[i], means, elapsed)
		}
	}
	return ls
}

// shadow is perf stat's metric after '#': CPUs utilized for the clocks,
// GHz for cycles, insn per cycle, % of all branches, else a rate per
// second of task time (K/M/G scaled).
func shadow(l line, means map[string]float64, elapsed float64) (float64, string, string) {
	clock, haveClock := means["task-clock"]
	if c, ok := means["cpu-clock"]; ok && !haveClock {
		clock, haveClock = c, true
	}
	switch {
	case l.clock:
		if elapsed > 0 {
			return l.mean / (elapsed * 1e9), "CPUs utilized", "%8.3f"
		}
		return 0, "", ""
	case l.canon == "instructions":
		if c := means["cycles"]; c > 0 {
			return l.mean / c, "insn per cycle", "%7.2f "
		}
	case l.canon == "branch-misses":
		if b := means["branch-instructions"]; b > 0 {
			return 100 * l.mean / b, "of all branches", "%7.2f%%"
		}
	case l.canon == "cycles" && haveClock && clock > 0:
		return l.mean / clock, "GHz", "%8.3f"
	}
	if !haveClock || clock == 0 {
		return 0, "", ""
	}
	rate, unit := 1e9*l.mean/clock, "/sec"
	for _, u := range []struct {
		p float64
		c string
	}{{1e9, "G"}, {1e6, "M"}, {1e3, "K"}} {
		if rate > u.p {
			rate, unit = rate/u.p, u.c+"/sec"
			break
		}
	}
	return rate, unit, "%8.3f"
}

// value is the count as perf prints it: msec with two decimals for the
// clocks, a whole number for the rest.
func (l line) value() string {
	if l.clock {
		return fmt.Sprintf("%.2f", l.mean/1e6)
	}
	return fmt.Sprintf("%.0f", l.mean)
}

func (l line) unit() string {
	if l.clock {
		return "msec"
	}
	return ""
}

// metricLen is the width perf gives the " # metric unit" column.
const metricLen = 35

// WriteText prints r in perf stat's default layout.
func WriteText(w io.Writer, r *Result) {
	runs := ""
	if len(r.Runs) > 1 {
		runs = fmt.Sprintf(" (%d runs)", len(r.Runs))
	}
	fmt.Fprintf(w, "\n Performance counter stats for %s%s:\n\n", r.Target, runs)
	reasons := map[string][]string{}
	var order []string
	for _, l := range r.lines() {
		if l.status != "" {
			fmt.Fprintf(w, "%18s %-4s %-32s%-*s\n", l.status, "", l.name, metricLen-7, "")
			if l.reason != "" {
				if reasons[l.reason] == nil {
					order = append(order, l.reason)
				}
				reasons[l.reason] = append(reasons[l.reason], l.name)
			}
			continue
		}
		fmt.Fprintf(w, "%18s %-4s %-32s", l.value(), l.unit(), l.name)
		if l.metricUnit == "" {
			fmt.Fprintf(w, "%-*s", metricLen, "")
		} else {
			m := " # " + fmt.Sprintf(l.metricFmt, l.metric)
			fmt.Fprintf(w, "%s %-*s", m, metricLen-len(m)-1, l.metricUnit)
		}
		if len(r.Runs) > 1 && l.noise != 0 {
			fmt.Fprintf(w, "  ( +-%6.2f%% )", l.noise)
		}
		if l.pct < 100 {
			fmt.Fprintf(w, "  (%.2f%%)", l.pct)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	writeElapsed(w, r)
	for _, why := range order {
		fmt.Fprintf(w, "<not supported> %s: %s\n", strings.Join(reasons[why], ", "), why)
	}
}

func writeElapsed(w io.Writer, r *Result) {
	mean, se := MeanStderr(r.Elapsed)
	if len(r.Elapsed) > 1 {
		prec := precision(se) + 2
		fmt.Fprintf(w, " %17.*f +- %.*f seconds time elapsed", prec, mean, prec, se)
		if pct := relPct(mean, se); pct != 0 {
			fmt.Fprintf(w, "  ( +-%6.2f%% )", pct)
		}
		fmt.Fprint(w, "\n\n")
		return
	}
	fmt.Fprintf(w, " %17.9f seconds time elapsed\n\n", mean)
	if r.HaveRusage {
		fmt.Fprintf(w, " %17.9f seconds user\n %17.9f seconds sys\n\n\n", r.User, r.Sys)
	}
}

// precision is the number of decimals that show the first significant
// digit of x (x ≤ 1), as perf's get_precision.
func precision(x float64) int {
	if x > 1 || x <= 0 {
		return 0
	}
	return int(math.Round(math.Ceil(-math.Log10(x))))
}

// WriteCSV prints r as `perf stat -x SEP` does: value, unit, event,
// [noise% with runs], running ns, % running, metric value, metric unit.
func WriteCSV(w io.Writer, r *Result, sep string) {
	for _, l := range r.lines() {
		val := l.value()
		if l.status != "" {
			val = l.status
		}
		f := []string{val, l.unit(), l.name}
		if len(r.Runs) > 1 {
			f = append(f, fmt.Sprintf("%.2f%%", l.noise))
		}
		pct := l.pct
		if l.status != "" {
			pct = 100
		}
		f = append(f, fmt.Sprint(l.running), fmt.Sprintf("%.2f", pct))
		if l.metricUnit != "" {
			f = append(f, fmt.Sprintf("%.3f", l.metric), l.metricUnit)
		} else {
			f = append(f, "", "")
		}
		fmt.Fprintln(w, strings.Join(f, sep))
	}
}

// WriteJSON prints r as `perf stat --json` does: one object per event and
// line, with "variance" (the noise in %) when there are several runs.
func WriteJSON(w io.Writer, r *Result) {
	q := func(s string) string {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false) // "<not supported>" as perf writes it
		enc.Encode(s)
		return strings.TrimSuffix(b.String(), "\n")
	}
	for _, l := range r.lines() {
		val := fmt.Sprintf("%f", l.mean)
		if l.clock {
			val = fmt.Sprintf("%f", l.mean/1e6)
		}
		pct := l.pct
		if l.status != "" {
			val, pct = l.status, 100
		}
		fmt.Fprintf(w, `{"counter-value" : %s, "unit" : %s, "event" : %s, `, q(val), q(l.unit()), q(l.name))
		if len(r.Runs) > 1 {
			fmt.Fprintf(w, `"variance" : %.2f, `, l.noise)
		}
		fmt.Fprintf(w, `"event-runtime" : %d, "pcnt-running" : %.2f, "metric-value" : %f, "metric-unit" : %s}`+"\n",
			l.running, pct, l.metric, q(l.metricUnit))
	}
}
