package main

import (
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

type machine struct {
	kernel, cpu, mem, clocksource string
	ncpu                          int
	tools                         [][2]string
	loadStart, loadEnd            string
}

type report struct {
	opts         *options
	machine      machine
	began, ended time.Time
	runs         []*runResult
	caps         []*captureResult
	long         *runResult // gprofile's long run
	// longPerfDwarf is perf --call-graph dwarf's long run, beside long.
	longPerfDwarf *runResult
}

func describeMachine(o *options) machine {
	m := machine{ncpu: runtime.NumCPU(), loadStart: loadavg()}
	m.kernel = firstLine(cmdOut("uname", "-r"))
	for _, l := range strings.Split(readFile("/proc/cpuinfo"), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			m.cpu = strings.TrimSpace(v)
			break
		}
	}
	for _, l := range strings.Split(readFile("/proc/meminfo"), "\n") {
		if strings.HasPrefix(l, "MemTotal:") {
			kib, _ := strconv.ParseFloat(strings.Fields(l)[1], 64)
			m.mem = fmt.Sprintf("%.1f GiB", kib/(1<<20))
		}
	}
	m.clocksource = strings.TrimSpace(readFile("/sys/devices/system/clocksource/clocksource0/current_clocksource"))
	bccVer := firstLine(cmdOut("dpkg-query", "-W", "-f", "${Version}", "bpfcc-tools"))
	if o.p.bccSource() != "" {
		bccVer += " (BCC_KERNEL_SOURCE=" + o.p.bccSource() + ")"
	}
	m.tools = [][2]string{
		{"gprofile", o.gpVersion},
		{"perf", firstLine(cmdOut(o.p.perf, "--version"))},
		{"bpftrace", firstLine(cmdOut(o.p.bpftrace, "--version"))},
		{"BCC (profile-bpfcc)", bccVer},
		{"go", runtime.Version()},
		{"cc", firstLine(cmdOut("cc", "--version"))},
	}
	return m
}

func cmdOut(name string, args ...string) string {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return "n/a"
	}
	return string(out)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func loadavg() string {
	f := strings.Fields(readFile("/proc/loadavg"))
	if len(f) < 3 {
		return "n/a"
	}
	return strings.Join(f[:3], " ")
}

// quietLoad is the most CPU, in % of all CPUs, that other processes may
// use during a run (and its paired no-profiler run) for the slowdown to be
// taken from that round.
const quietLoad = 5.0

// stat is a median with its range over the rounds.
type stat struct{ med, lo, hi float64 }

func (s stat) ok() bool { return !math.IsNaN(s.med) }

func summarize(xs []float64) stat {
	xs = slices.DeleteFunc(slices.Clone(xs), func(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) })
	if len(xs) == 0 {
		return stat{math.NaN(), math.NaN(), math.NaN()}
	}
	slices.Sort(xs)
	med := xs[len(xs)/2]
	if len(xs)%2 == 0 {
		med = (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	return stat{med, xs[0], xs[len(xs)-1]}
}

// cell is the figures of one configuration at one frequency.
type cell struct {
	n                                                   int
	errs                                                []string
	slowdown, cpuPerSample, cpuInRun, bpfNs, rss, deliv stat
	accounted                                           stat  // BPF time + profiler CPU in the run, % of all CPUs
	lost                                                int64 // summed; -1 not reported
	quietRounds                                         int   // rounds the slowdown is taken from
	capture                                             stat
}

// cell summarizes cfg's runs at hz of the main length (-seconds).
func (r *report) cell(cfg string, hz int) cell { return r.cellOf(cfg, hz, r.opts.seconds) }

// cellOf summarizes cfg's runs at hz of secs seconds.
func (r *report) cellOf(cfg string, hz int, secs float64) cell {
	var c cell
	var slow, all, cps, inRun, ns, rss, deliv, acct []float64
	c.lost = -1
	for _, x := range r.runs {
		if x.cfg != cfg || x.hz != hz || x.secs != secs {
			continue
		}
		if x.err != "" {
			c.errs = append(c.errs, x.err)
			continue
		}
		c.n++
		if base := r.find("none", hz, x.round, secs); base != nil && cfg != "none" {
			all = append(all, 100*(1-x.plainRate/base.plainRate))
			if x.otherLoad <= quietLoad && base.otherLoad <= quietLoad {
				slow = append(slow, 100*(1-x.plainRate/base.plainRate))
			}
		}
		if cfg == "none" {
			continue
		}
		if x.delivered > 0 {
			cps = append(cps, 1e6*x.cpu/float64(x.delivered))
			deliv = append(deliv, 100*float64(x.delivered)/(float64(hz)*float64(r.machine.ncpu)*x.window))
		}
		inRun = append(inRun, 100*x.cpuInRun/(x.window*float64(r.machine.ncpu)))
		if x.bpf.runCnt > 0 {
			acct = append(acct, 100*(float64(x.bpf.runNs)/1e9+x.cpuInRun)/(x.window*float64(r.machine.ncpu)))
		}
		ns = append(ns, x.bpfNsPerRun())
		rss = append(rss, float64(x.rssKiB)/1024)
		if x.lost >= 0 {
			c.lost = max(c.lost, 0) + x.lost
		}
	}
	nan := func(xs []float64) []float64 { return slices.DeleteFunc(xs, func(x float64) bool { return x < 0 }) }
	c.quietRounds = len(slow)
	if len(slow) == 0 {
		slow = all // no quiet round: say so in the table
	}
	c.slowdown, c.cpuPerSample, c.cpuInRun = summarize(slow), summarize(cps), summarize(inRun)
	c.bpfNs, c.rss, c.deliv = summarize(nan(ns)), summarize(rss), summarize(deliv)
	c.accounted = summarize(acct)
	var walls []float64
	for _, k := range r.caps {
		if k.cfg == cfg && k.hz == hz && k.err == "" {
			walls = append(walls, k.wall)
		}
	}
	c.capture = summarize(walls)
	return c
}

func (r *report) find(cfg string, hz, round int, secs float64) *runResult {
	for _, x := range r.runs {
		if x.cfg == cfg && x.hz == hz && x.round == round && x.secs == secs && x.err == "" {
			return x
		}
	}
	return nil
}

func fmtF(x float64, prec int) string {
	if math.IsNaN(x) || x < 0 && prec == 0 {
		return "n/a"
	}
	return strconv.FormatFloat(x, 'f', prec, 64)
}

func fmtStat(s stat, prec int) string {
	if !s.ok() {
		return "n/a"
	}
	if s.lo == s.hi {
		return fmtF(s.med, prec)
	}
	return fmt.Sprintf("%s (%s … %s)", fmtF(s.med, prec), fmtF(s.lo, prec), fmtF(s.hi, prec))
}

func (r *report) writeCSV(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := csv.NewWriter(f)
	w.Write([]string{"config", "hz", "round", "iters_per_sec_robust", "iters_per_sec", "steal_sec", "slices_kept",
		"window_s", "sampled_s", "profiler_cpu_s", "profiler_cpu_in_run_s", "other_load_pct", "peak_rss_kib", "samples", "lost",
		"bpf_run_ns", "bpf_run_cnt", "error", "workload_s"})
	for _, x := range r.runs {
		w.Write([]string{x.cfg, strconv.Itoa(x.hz), strconv.Itoa(x.round + 1), fmtF(x.rate, 0), fmtF(x.plainRate, 0),
			fmtF(x.steal, 3), x.slicesKept, fmtF(x.window, 3), fmtF(x.sampled, 1), fmtF(x.cpu, 3), fmtF(x.cpuInRun, 2), fmtF(x.otherLoad, 1),
			strconv.FormatInt(x.rssKiB, 10), strconv.FormatInt(x.delivered, 10), strconv.FormatInt(x.lost, 10),
			strconv.FormatUint(x.bpf.runNs, 10), strconv.FormatUint(x.bpf.runCnt, 10), x.err, fmtF(x.secs, 1)})
	}
	for _, l := range []*runResult{r.long, r.longPerfDwarf} {
		if l == nil {
			continue
		}
		w.Write([]string{l.cfg, strconv.Itoa(l.hz), "long", "", "", "", "", fmtF(l.window, 3), fmtF(l.window, 1),
			fmtF(l.cpu, 3), "", "", strconv.FormatInt(l.rssKiB, 10), strconv.FormatInt(l.delivered, 10),
			strconv.FormatInt(l.lost, 10), "", "", l.err})
	}
	for _, k := range r.caps {
		w.Write([]string{k.cfg, strconv.Itoa(k.hz), "capture", "", "", "", "", fmtF(k.wall, 3), "", fmtF(k.cpu, 3),
			"", "", "", "", "", "", "", k.err})
	}
	w.Flush()
	return w.Error()
}

// readCSV loads the runs, captures and long run of a CSV that writeCSV
// wrote, for -replot.
func (r *report) readCSV(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	cr := csv.NewReader(f)
	cr.FieldsPerRecord = -1 // capture and long rows are shorter than the rounds'
	rows, err := cr.ReadAll()
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	num := func(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v }
	for _, c := range rows[1:] {
		if len(c) < 18 {
			continue
		}
		hz, _ := strconv.Atoi(c[1])
		switch c[2] {
		case "capture":
			r.caps = append(r.caps, &captureResult{cfg: c[0], hz: hz, wall: num(c[7]), cpu: num(c[9]), err: c[17]})
			continue
		case "long":
			l := &runResult{cfg: c[0], hz: hz, window: num(c[7]), sampled: num(c[8]), cpu: num(c[9]),
				rssKiB: int64(num(c[12])), delivered: int64(num(c[13])), lost: int64(num(c[14])), err: c[17]}
			if l.cfg == "perf-dwarf" {
				r.longPerfDwarf = l
			} else {
				r.long = l
			}
			continue
		}
		round, _ := strconv.Atoi(c[2])
		secs := r.opts.seconds // CSVs from before the column ran one length
		if len(c) > 18 {
			secs = num(c[18])
		}
		r.runs = append(r.runs, &runResult{cfg: c[0], hz: hz, round: round - 1, rate: num(c[3]), plainRate: num(c[4]),
			steal: num(c[5]), slicesKept: c[6], window: num(c[7]), sampled: num(c[8]), cpu: num(c[9]),
			cpuInRun: num(c[10]), otherLoad: num(c[11]), rssKiB: int64(num(c[12])), delivered: int64(num(c[13])),
			lost: int64(num(c[14])), bpf: progStats{uint64(num(c[15])), uint64(num(c[16]))}, err: c[17], secs: secs})
	}
	return nil
}

// marginal is the fixed and the per-sample part of a profiler's CPU, from
// the medians of its long and short runs at one frequency: CPU = fixed +
// perSample × samples, through the two points.
type marginal struct {
	longCPU, shortCPU   float64 // median profiler CPU, s
	longN, shortN       float64 // median samples delivered
	fixedS, perSampleUS float64
	ok                  bool
}

func (r *report) marginal(cfg string, hz int) marginal {
	med := func(secs float64) (cpu, n float64, ok bool) {
		var cs, ns []float64
		for _, x := range r.runs {
			if x.cfg == cfg && x.hz == hz && x.secs == secs && x.err == "" && x.delivered > 0 {
				cs, ns = append(cs, x.cpu), append(ns, float64(x.delivered))
			}
		}
		if len(cs) == 0 {
			return 0, 0, false
		}
		return summarize(cs).med, summarize(ns).med, true
	}
	var m marginal
	var ok1, ok2 bool
	m.longCPU, m.longN, ok1 = med(r.opts.seconds)
	m.shortCPU, m.shortN, ok2 = med(r.opts.short)
	if !ok1 || !ok2 || m.longN <= m.shortN {
		return m
	}
	slope := (m.longCPU - m.shortCPU) / (m.longN - m.shortN)
	m.perSampleUS, m.fixedS, m.ok = 1e6*slope, m.shortCPU-slope*m.shortN, true
	return m
}
