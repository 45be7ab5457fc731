package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
)

var configTitle = map[string]string{
	"none":        "none (workload alone)",
	"floor":       "floor (empty BPF program)",
	"perf":        "perf record -g + perf report",
	"perf-dwarf":  "perf record --call-graph dwarf + perf report",
	"bpftrace":    "bpftrace profile:hz",
	"bcc":         "BCC profile-bpfcc -f",
	"gprofile-fp": "gprofile --call-graph fp",
	"gprofile":    "gprofile (--call-graph dwarf)",
}

func (r *report) writeMarkdown(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	o := r.opts
	m := r.machine
	fmt.Fprintf(f, "# gprofile benchmark, %s\n\n", r.began.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(f, "Machine: Linux %s, %s, %d CPUs, %s memory, clocksource %s. ", m.kernel, m.cpu, m.ncpu, m.mem, m.clocksource)
	fmt.Fprintf(f, "Load average %s at the start, %s at the end; the run took %.1f min.\n\n", m.loadStart, m.loadEnd, r.ended.Sub(r.began).Minutes())
	if o.kcost != "" {
		fmt.Fprintf(f, "Kernel entries (bench/kcost): %s.\n\n", o.kcost)
	}
	fmt.Fprintf(f, "Tools:")
	for i, t := range m.tools {
		sep := ","
		if i == len(m.tools)-1 {
			sep = "."
		}
		fmt.Fprintf(f, " %s: %s%s", t[0], t[1], sep)
	}
	fmt.Fprintf(f, "\n\n%s\n\nEach run: the workload (%d threads, a 20-frame call chain) for %g s; %d interleaved rounds of every configuration at every frequency; figures are the median (min … max) over the rounds. Slowdown is paired with the round's own no-profiler run.\n",
		r.otherLoadLine(), m.ncpu, o.seconds, o.reps)
	if len(o.server) > 0 {
		fmt.Fprintf(f, "\nThe \"real server\" variant: beside the workload, through the whole matrix, ran `%s`.\n", strings.Join(o.server, "`, `"))
	}
	if o.short > 0 {
		fmt.Fprintf(f, "\nEvery configuration also ran for %g s in the same rounds: the tables after the targets split each profiler's CPU into a fixed part and a per-sample part.\n", o.short)
	}
	if len(o.skip) > 0 {
		fmt.Fprintf(f, "\nSkipped:")
		for k, v := range o.skip {
			fmt.Fprintf(f, " %s (%s);", k, v)
		}
		fmt.Fprintln(f)
	}
	for _, hz := range o.freqs {
		r.writeTable(f, hz)
	}
	fmt.Fprint(f, legend)
	r.writeTargets(f)
	if o.short > 0 {
		for _, hz := range o.freqs {
			r.writeMarginal(f, hz)
		}
	}
	r.writeLong(f)
	if o.ringbufPath != "" {
		if b, err := os.ReadFile(o.ringbufPath); err == nil {
			fmt.Fprintf(f, "\n%s", b)
		}
	}
	r.writeErrors(f)
	return nil
}

const legend = `
Columns: *slowdown*: loss of workload iterations per second against the same round's run without a profiler, over the rounds where other processes took at most 5 % of the CPUs in both runs (the table says how many; with none, all rounds); the CSV also has a contention-filtered rate (bench/workload.c), which is biased in favour of profilers whose own work comes in bursts; *accounted cost*: the CPU time the profiler measurably took while the workload ran, as a share of all CPUs: its BPF programs' run time plus its processes' CPU time (not the timer interrupt around the program, which the floor pays too; not cache effects); unlike the slowdown it does not depend on what else the machine runs; *profiler CPU*: user+sys seconds of the profiler's whole process tree from start to exit, post-processing included (perf report for perf, printing for bpftrace and BCC, symbolizing and writing the profile for gprofile), per sample delivered; *during run*: the part of it spent while the workload ran, as a share of all CPUs; *in-kernel*: run_time_ns / run_cnt of the tool's perf_event BPF programs over the run (kernel.bpf_stats_enabled=1), so the timer interrupt and perf's own work are not in it (perf has no BPF program); *peak RSS*: largest resident set of any process of the profiler; *delivered*: samples the profiler reports (gprofile's summary line, perf record's count, the sum of bpftrace's and BCC's counts, the floor program's run count) against frequency × CPUs × seconds from sampling started to SIGINT (gprofile's own "in N s" is in the CSV as sampled_s: 0.1 s resolution, and it includes draining the ring buffer after the stop); gprofile and BCC leave out idle samples; *lost*: gprofile's ring-buffer losses, perf's lost samples, BCC's stack traces it could not show; *1 s capture*: wall time of a 1 s capture up to a symbolized result on disk or on stdout (perf: perf record -- sleep 1, then perf report --stdio).
`

func (r *report) writeTable(w io.Writer, hz int) {
	fmt.Fprintf(w, "\n## %d Hz\n\n", hz)
	fmt.Fprintln(w, "| profiler | workload slowdown % | accounted cost, % of all CPUs | profiler CPU µs/sample | profiler CPU during run, % of all CPUs | in-kernel ns/sample | peak RSS MiB | samples delivered, % of f×CPUs×s | lost | 1 s capture to symbolized result, s |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, cfg := range configs {
		if _, skipped := r.opts.skip[cfg]; skipped {
			continue
		}
		c := r.cell(cfg, hz)
		if cfg == "none" {
			fmt.Fprintf(w, "| %s | 0 (%s iters/s) | | | | | | | | |\n", configTitle[cfg], r.noneRate(hz))
			continue
		}
		lost := "n/a"
		if c.lost >= 0 {
			lost = fmt.Sprint(c.lost)
		}
		capture := fmtStat(c.capture, 2)
		if cfg == "floor" {
			capture = "n/a (no stacks)"
			lost = "n/a"
		}
		if c.n == 0 {
			fmt.Fprintf(w, "| %s | failed: %s | | | | | | | | |\n", configTitle[cfg], firstErr(c.errs))
			continue
		}
		acct := fmtStat(c.accounted, 2)
		if isPerf(cfg) {
			acct = "n/a (kernel side unmeasured)"
		}
		slow := fmtStat(c.slowdown, 1)
		if c.quietRounds == 0 {
			slow += ", no quiet round"
		} else if c.quietRounds < c.n {
			slow += fmt.Sprintf(", %d quiet rounds", c.quietRounds)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", configTitle[cfg],
			slow, acct, fmtStat(c.cpuPerSample, 1), fmtStat(c.cpuInRun, 2),
			fmtStat(c.bpfNs, 0), fmtStat(c.rss, 0), fmtStat(c.deliv, 1), lost, capture)
	}
}

func (r *report) noneRate(hz int) string {
	var xs []float64
	for _, x := range r.runs {
		if x.cfg == "none" && x.hz == hz && x.err == "" {
			xs = append(xs, x.rate)
		}
	}
	s := summarize(xs)
	if !s.ok() {
		return "n/a"
	}
	return fmt.Sprintf("%.2fM", s.med/1e6)
}

func firstErr(errs []string) string {
	if len(errs) == 0 {
		return "no runs"
	}
	return strings.ReplaceAll(strings.ReplaceAll(errs[0], "|", "/"), "\n", " ")
}

// verdict says "met" when got ≤ limit, or by how much it missed.
func verdict(got, limit float64, unit string) string {
	switch {
	case got != got || limit != limit:
		return "n/a"
	case got <= limit:
		return "**met**"
	default:
		return fmt.Sprintf("**missed** by %.2f%s", got-limit, unit)
	}
}

func (r *report) writeTargets(w io.Writer) {
	fmt.Fprint(w, "\n## Targets\n\n")
	fmt.Fprintln(w, "| target | measured (medians) | verdict |")
	fmt.Fprintln(w, "| --- | --- | --- |")
	has := func(hz int) bool {
		for _, f := range r.opts.freqs {
			if f == hz {
				return true
			}
		}
		return false
	}
	if has(4999) {
		g, fl := r.cell("gprofile", 4999).slowdown.med, r.cell("floor", 4999).slowdown.med
		fmt.Fprintf(w, "| slowdown at 4999 Hz ≤ floor + 0.5 point | gprofile %.2f %%, floor %.2f %% (limit %.2f %%) | %s |\n",
			g, fl, fl+0.5, verdict(g, fl+0.5, " point"))
		ga, fa := r.cell("gprofile", 4999).accounted.med, r.cell("floor", 4999).accounted.med
		fmt.Fprintf(w, "| the same, by accounted cost | gprofile %.2f %%, floor %.2f %% (limit %.2f %%) | %s |\n",
			ga, fa, fa+0.5, verdict(ga, fa+0.5, " point"))
	}
	for _, hz := range []int{999, 4999} {
		if !has(hz) {
			continue
		}
		g := r.cell("gprofile", hz).cpuPerSample.med
		p := r.cell("perf", hz).cpuPerSample.med
		fmt.Fprintf(w, "| CPU per sample at %d Hz ≤ 0.25 × perf | gprofile %.1f µs, perf %.1f µs: %.2f× | %s |\n",
			hz, g, p, g/p, verdict(g/p, 0.25, "×"))
		if d := r.cell("perf-dwarf", hz).cpuPerSample.med; d > 0 {
			fmt.Fprintf(w, "| CPU per sample at %d Hz ≤ 0.05 × perf dwarf | gprofile %.1f µs, perf dwarf %.1f µs: %.2f× | %s |\n",
				hz, g, d, g/d, verdict(g/d, 0.05, "×"))
		}
		for _, other := range []string{"bpftrace", "bcc"} {
			o := r.cell(other, hz).cpuPerSample.med
			fmt.Fprintf(w, "| CPU per sample at %d Hz < %s | gprofile %.1f µs, %s %.1f µs: %.2f× | %s |\n",
				hz, other, g, other, o, g/o, verdict(g/o, 1, "×"))
		}
	}
	for _, hz := range r.opts.freqs {
		g, b := r.cell("gprofile", hz).bpfNs.med, r.cell("bpftrace", hz).bpfNs.med
		fmt.Fprintf(w, "| in-kernel ns/sample at %d Hz ≤ 0.75 × bpftrace | gprofile %.0f ns, bpftrace %.0f ns: %.2f× | %s |\n",
			hz, g, b, g/b, verdict(g/b, 0.75, "×"))
	}
	if has(999) {
		c := r.cell("gprofile", 999)
		fmt.Fprintf(w, "| %g s runs at 999 Hz: peak RSS ≤ 40 MB (38.1 MiB) | %s MiB | %s |\n",
			r.opts.seconds, fmtStat(c.rss, 1), verdict(c.rss.hi, 40e6/(1<<20), " MiB (worst round)"))
		fmt.Fprintf(w, "| %g s runs at 999 Hz: 0 samples lost | %d lost over the rounds | %s |\n",
			r.opts.seconds, c.lost, verdict(float64(c.lost), 0, " samples"))
	}
	for _, hz := range r.opts.freqs {
		g, p := r.cell("gprofile", hz).capture.med, r.cell("perf", hz).capture.med
		fmt.Fprintf(w, "| 1 s capture to result at %d Hz ≤ 0.5 × perf | gprofile %.2f s, perf %.2f s: %.2f× | %s |\n",
			hz, g, p, g/p, verdict(g/p, 0.5, "×"))
	}
	if l := r.long; l != nil && l.err == "" {
		exp := 999 * float64(r.machine.ncpu) * l.window
		fmt.Fprintf(w, "| %.0f s at 999 Hz on all CPUs: no sample lost | %d lost of %d delivered (%.1f%% of %.0f expected) | %s |\n",
			l.window, l.lost, l.delivered, 100*float64(l.delivered)/exp, exp, verdict(float64(l.lost), 0, " samples"))
		mib := float64(l.rssKiB) / 1024
		fmt.Fprintf(w, "| same run: peak RSS < 50 MB (47.7 MiB) | %.1f MiB | %s |\n", mib, verdict(mib, 50e6/(1<<20), " MiB"))
		if d := r.longPerfDwarf; d != nil && d.err == "" && d.delivered > 0 && l.delivered > 0 {
			g, p := l.cpuPerSampleLong(), d.cpuPerSampleLong()
			fmt.Fprintf(w, "| %.0f s at 999 Hz, then perf dwarf as long: CPU per sample ≤ 0.05 × perf dwarf | gprofile %.1f µs, perf dwarf %.1f µs: %.3f× | %s |\n",
				l.window, g, p, g/p, verdict(g/p, 0.05, "×"))
		}
	}
}

func (r *report) writeLong(w io.Writer) {
	l := r.long
	if l == nil {
		return
	}
	fmt.Fprintf(w, "\n## Long run\n\n")
	if l.err != "" {
		fmt.Fprintf(w, "gprofile -f 999 -d %d failed: %s\n", r.opts.longSecs, l.err)
		return
	}
	fmt.Fprintf(w, "`gprofile --sw-event -f 999 -d %d` with the workload on every CPU: %d samples in %.1f s, %d lost, %.2f s of CPU (%.1f µs/sample), peak RSS %.1f MiB.\n",
		r.opts.longSecs, l.delivered, l.window, l.lost, l.cpu, l.cpuPerSampleLong(), float64(l.rssKiB)/1024)
	switch d := r.longPerfDwarf; {
	case d == nil:
	case d.err != "":
		fmt.Fprintf(w, "\nperf record --call-graph dwarf for %d s failed: %s\n", r.opts.longSecs, d.err)
	default:
		fmt.Fprintf(w, "\nThen, the same way, `perf record -e cpu-clock -F 999 -a --call-graph dwarf -- sleep %d` and `perf report --stdio`: %d samples, %d lost, %.2f s of CPU for both (%.1f µs/sample), peak RSS %.1f MiB.\n",
			r.opts.longSecs, d.delivered, d.lost, d.cpu, d.cpuPerSampleLong(), float64(d.rssKiB)/1024)
	}
}

func (r *report) writeErrors(w io.Writer) {
	var errs []string
	for _, x := range r.runs {
		if x.err != "" {
			errs = append(errs, fmt.Sprintf("- %s %d Hz round %d: %s", x.cfg, x.hz, x.round+1, firstErr([]string{x.err})))
		}
	}
	for _, k := range r.caps {
		if k.err != "" {
			errs = append(errs, fmt.Sprintf("- capture %s %d Hz: %s", k.cfg, k.hz, firstErr([]string{k.err})))
		}
	}
	if len(errs) > 0 {
		fmt.Fprintf(w, "\n## Failed runs\n\n%s\n", strings.Join(errs, "\n"))
	}
}

// otherLoadLine says how much CPU other processes took during the runs.
func (r *report) otherLoadLine() string {
	var xs []float64
	busy := 0
	for _, x := range r.runs {
		if x.err == "" {
			xs = append(xs, max(x.otherLoad, 0))
			if x.otherLoad > 5 {
				busy++
			}
		}
	}
	s := summarize(xs)
	if !s.ok() {
		return ""
	}
	return fmt.Sprintf("Other processes on the machine used %.1f %% of the CPUs during a run (median; max %.1f %%); %d of %d runs had more than 5 %% (runs are in the CSV).",
		s.med, s.hi, busy, len(xs))
}

// replotCSV writes the per-frequency tables and the targets of an earlier
// run's CSV to o.out (for a change in how figures are summarized).
func replotCSV(o *options, path string) error {
	r := &report{opts: o, machine: machine{ncpu: runtime.NumCPU()}}
	if err := r.readCSV(path); err != nil {
		return err
	}
	f, err := os.Create(o.out)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(f, "Re-rendered from %s.\n", path)
	for _, hz := range o.freqs {
		r.writeTable(f, hz)
	}
	fmt.Fprint(f, legend)
	r.writeTargets(f)
	if o.short > 0 {
		for _, hz := range o.freqs {
			r.writeMarginal(f, hz)
		}
	}
	return nil
}

// writeMarginal writes the fixed and per-sample parts of each profiler's
// CPU at hz (report.marginal), and the short runs' CPU per sample.
func (r *report) writeMarginal(w io.Writer, hz int) {
	o := r.opts
	fmt.Fprintf(w, "\n## Fixed and per-sample CPU, %d Hz\n\n", hz)
	fmt.Fprintf(w, "From the medians of the %g s and %g s runs: profiler CPU = fixed + per sample × samples.\n\n", o.short, o.seconds)
	fmt.Fprintf(w, "| profiler | CPU µs/sample, %g s runs | CPU µs/sample, %g s runs | CPU s, %g s / %g s | samples, %g s / %g s | fixed CPU, s | per-sample CPU, µs | peak RSS MiB, %g s runs |\n",
		o.short, o.seconds, o.short, o.seconds, o.short, o.seconds, o.short)
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, cfg := range configs {
		if cfg == "none" || o.skip[cfg] != "" {
			continue
		}
		m := r.marginal(cfg, hz)
		short, long := r.cellOf(cfg, hz, o.short), r.cellOf(cfg, hz, o.seconds)
		fixed, per := "n/a", "n/a"
		if m.ok {
			fixed, per = fmtF(m.fixedS, 3), fmtF(m.perSampleUS, 1)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s / %s | %s / %s | %s | %s | %s |\n", configTitle[cfg],
			fmtStat(short.cpuPerSample, 1), fmtStat(long.cpuPerSample, 1),
			fmtF(m.shortCPU, 2), fmtF(m.longCPU, 2), fmtF(m.shortN, 0), fmtF(m.longN, 0), fixed, per, fmtStat(short.rss, 0))
	}
}
