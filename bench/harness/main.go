// Command harness runs gprofile's side-by-side benchmark: the workload
// alone and under each profiler (floor, perf, bpftrace, BCC, gprofile) at
// each frequency, interleaved and repeated; then 1-second captures timed
// to a symbolized result; then one long gprofile run. It writes a
// markdown report and a CSV of every run. bench/run.sh builds everything
// and calls it; run it as root.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	p           paths
	freqs       []int
	reps        int
	seconds     float64
	short       float64  // seconds of the second, shorter run of every configuration (0: none)
	server      []string // the "real server" neighbours' command lines (none: the plain variant)
	capReps     int
	longSecs    int
	out, csv    string
	work        string
	skip        map[string]string // config -> why it is skipped
	ringbufPath string            // output of the ring buffer test, if run
	gpVersion   string
	kcost       string // bench/kcost's line: what the machine charges for kernel entries
}

func main() {
	o := options{skip: map[string]string{}}
	var freqs, skip string
	flag.StringVar(&o.p.workload, "workload", "", "workload binary")
	flag.StringVar(&o.p.floor, "floor", "", "floor binary")
	flag.StringVar(&o.p.gprofile, "gprofile", "", "gprofile binary")
	flag.StringVar(&o.p.perf, "perf", "perf", "perf binary")
	flag.StringVar(&o.p.bpftrace, "bpftrace", "bpftrace", "bpftrace binary")
	flag.StringVar(&o.p.bcc, "bcc", "profile-bpfcc", "BCC profile tool")
	flag.StringVar(&freqs, "freqs", "99,999,4999", "comma-separated `frequencies` in Hz")
	flag.IntVar(&o.reps, "reps", 5, "rounds of the interleaved matrix")
	flag.Float64Var(&o.seconds, "seconds", 8, "workload `seconds` per run")
	flag.Float64Var(&o.short, "short", 3, "workload `seconds` of a second, shorter run of every configuration, for the fixed and per-sample parts of the cost (0: none)")
	server := flag.String("server", "", "`commands` to keep running beside the workload (the \"real server\" variant), separated by ';', arguments by spaces")
	flag.IntVar(&o.capReps, "capture-reps", 2, "repetitions of each 1 s capture")
	flag.IntVar(&o.longSecs, "long", 60, "`seconds` of the long gprofile run (0: skip)")
	flag.StringVar(&o.out, "o", "results.md", "markdown report `file`")
	flag.StringVar(&o.csv, "csv", "results.csv", "CSV `file` of every run")
	flag.StringVar(&o.work, "work", "", "scratch `dir` (default: a temporary one)")
	flag.StringVar(&skip, "skip", "", "configs to skip, `cfg=reason;cfg=reason`")
	flag.StringVar(&o.ringbufPath, "ringbuf", "", "markdown `file` of the ring buffer test to include")
	flag.StringVar(&o.gpVersion, "gprofile-version", "", "gprofile version for the report")
	flag.StringVar(&o.kcost, "kcost", "", "bench/kcost's `line` for the report (the machine's cost of kernel entries)")
	replot := flag.String("replot", "", "only write the tables and targets of this `CSV` (from an earlier run) to -o")
	flag.Parse()
	for _, f := range strings.Split(freqs, ",") {
		hz, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || hz <= 0 {
			fatal(fmt.Errorf("bad frequency %q", f))
		}
		o.freqs = append(o.freqs, hz)
	}
	for _, c := range strings.Split(*server, ";") {
		if c = strings.TrimSpace(c); c != "" {
			o.server = append(o.server, c)
		}
	}
	if o.short >= o.seconds {
		fatal(fmt.Errorf("-short %g must be below -seconds %g", o.short, o.seconds))
	}
	for _, kv := range strings.Split(skip, ";") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			o.skip[k] = v
		}
	}
	if o.p.bccSource() != "" {
		o.p.bccEnv = []string{"BCC_KERNEL_SOURCE=" + o.p.bccSource()}
	}
	if *replot != "" {
		if err := replotCSV(&o, *replot); err != nil {
			fatal(err)
		}
		return
	}
	if o.work == "" {
		d, err := os.MkdirTemp("", "gprofile-bench-")
		if err != nil {
			fatal(err)
		}
		defer os.RemoveAll(d)
		o.work = d
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		killAll()
	}()
	err := run(ctx, &o)
	killAll()
	if err != nil {
		fatal(err)
	}
}

func (p *paths) bccSource() string { return os.Getenv("BCC_KERNEL_SOURCE") }

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "harness: %v\n", err)
	os.Exit(1)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func run(ctx context.Context, o *options) error {
	r := &report{opts: o, began: time.Now(), machine: describeMachine(o)}
	stopServer, err := startServer(o)
	if err != nil {
		return err
	}
	defer stopServer()
	durations := []float64{o.seconds}
	if o.short > 0 {
		durations = append(durations, o.short)
	}
	total := o.reps * len(o.freqs) * len(configs) * len(durations)
	n := 0
	for round := 0; round < o.reps; round++ {
		for _, hz := range o.freqs {
			for i := range configs {
				cfg := configs[(i+round)%len(configs)]
				if _, skipped := o.skip[cfg]; skipped {
					continue
				}
				for _, secs := range durations {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					n++
					res, err := runOne(o, cfg, hz, round, secs)
					if err != nil {
						logf("run %d/%d %s %d Hz %g s round %d: %v", n, total, cfg, hz, secs, round+1, err)
						res = &runResult{cfg: cfg, hz: hz, round: round, secs: secs, err: err.Error()}
					} else {
						logf("run %d/%d %-8s %4d Hz %g s round %d: %.0f iters/s (plain %.0f), %d samples, cpu %.2fs, kernel %s ns/sample",
							n, total, cfg, hz, secs, round+1, res.rate, res.plainRate, res.delivered, res.cpu, fmtF(res.bpfNsPerRun(), 0))
					}
					r.runs = append(r.runs, res)
				}
			}
		}
	}
	if err := captures(ctx, o, r); err != nil {
		return err
	}
	if o.longSecs > 0 && o.skip["gprofile"] == "" {
		lr, err := longRun(o)
		if err != nil {
			logf("long run: %v", err)
			lr = &runResult{cfg: "gprofile", hz: 999, err: err.Error()}
		}
		r.long = lr
	}
	if o.longSecs > 0 && o.skip["gprofile"] == "" && o.skip["perf-dwarf"] == "" {
		lr, err := longPerfDwarfRun(o)
		if err != nil {
			logf("long run: perf dwarf: %v", err)
			lr = &runResult{cfg: "perf-dwarf", hz: 999, err: err.Error()}
		}
		r.longPerfDwarf = lr
	}
	r.ended = time.Now()
	r.machine.loadEnd = loadavg()
	if err := r.writeCSV(o.csv); err != nil {
		return err
	}
	return r.writeMarkdown(o.out)
}

// runResult is one run of the workload, with or without a profiler.
type runResult struct {
	cfg        string
	hz, round  int
	secs       float64 // workload seconds asked for
	rate       float64 // robust iterations per second
	plainRate  float64
	steal      float64
	slicesKept string  // kept/total
	window     float64 // seconds sampled with the workload running
	sampled    float64 // seconds the profiler sampled, when it says; else window
	cpu        float64 // profiler CPU seconds, post-processing included
	cpuInRun   float64 // profiler CPU seconds while the workload ran
	rssKiB     int64
	delivered  int64
	lost       int64   // -1: not reported
	otherLoad  float64 // CPU share of everything but workload and profiler, %
	workCPU    float64 // workload's CPU seconds
	workSecs   float64 // workload's wall seconds
	bpf        progStats
	err        string
}

// cpuPerSampleLong is a long run's profiler CPU per sample delivered, µs.
func (r *runResult) cpuPerSampleLong() float64 {
	return 1e6 * r.cpu / float64(max(r.delivered, 1))
}

func (r *runResult) bpfNsPerRun() float64 {
	if r.bpf.runCnt == 0 {
		return -1
	}
	return float64(r.bpf.runNs) / float64(r.bpf.runCnt)
}

func runOne(o *options, cfg string, hz, round int, secs float64) (*runResult, error) {
	dir := filepath.Join(o.work, fmt.Sprintf("%s-%d-%d-%g", cfg, hz, round, secs))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	res := &runResult{cfg: cfg, hz: hz, round: round, secs: secs, lost: -1, delivered: -1}
	if cfg == "none" {
		busy0 := busyCPU()
		err := workload(o, dir, secs, res)
		res.otherLoad = 100 * (busyCPU() - busy0 - res.workCPU) / (res.workSecs * float64(runtime.NumCPU()))
		return res, err
	}
	s, err := startProfiler(cfg, hz, dir, &o.p, int(secs)+300)
	if err != nil {
		return nil, err
	}
	before, cpu0, busy0, t0 := readStats(s.progs), treeCPU(s.main.pid()), busyCPU(), time.Now()
	werr := workload(o, dir, secs, res)
	after, cpu1, busy1 := readStats(s.progs), treeCPU(s.main.pid()), busyCPU()
	res.window = time.Since(t0).Seconds()
	res.cpuInRun = cpu1 - cpu0
	res.otherLoad = 100 * (busy1 - busy0 - res.workCPU - res.cpuInRun) / (res.window * float64(runtime.NumCPU()))
	res.bpf = progStats{after.runNs - before.runNs, after.runCnt - before.runCnt}
	if err := s.finish(); err != nil {
		return nil, err
	}
	if werr != nil {
		return nil, werr
	}
	res.cpu, res.rssKiB = s.cost()
	res.delivered, res.lost = s.samples(res.bpf.runCnt)
	res.sampled = res.window
	if secs := s.sampledSecs(); secs > 0 {
		res.sampled = secs
	}
	return res, nil
}

// workload runs the workload for secs seconds and fills in its rates.
func workload(o *options, dir string, secs float64, res *runResult) error {
	b, err := runFG(dir, "workload", time.Duration(secs+60)*time.Second, nil,
		o.p.workload, strconv.FormatFloat(secs, 'f', -1, 64))
	if err != nil {
		return err
	}
	kv := parseKV(readFile(b.stdout))
	res.rate, _ = strconv.ParseFloat(kv["iters_per_sec_robust"], 64)
	res.plainRate, _ = strconv.ParseFloat(kv["iters_per_sec"], 64)
	res.steal, _ = strconv.ParseFloat(kv["steal_sec"], 64)
	res.slicesKept = kv["slices_kept"] + "/" + kv["slices"]
	res.workCPU, _ = b.rusage()
	res.workSecs = b.wall.Seconds()
	if res.rate == 0 {
		return fmt.Errorf("workload printed no rate: %q", readFile(b.stdout))
	}
	return nil
}

func parseKV(s string) map[string]string {
	kv := map[string]string{}
	for _, f := range strings.Fields(s) {
		if k, v, ok := strings.Cut(f, "="); ok {
			kv[k] = v
		}
	}
	return kv
}

// startServer starts the "real server" neighbours (o.server), which run
// through the whole matrix, and returns the function that stops them. A
// neighbour that exits early fails the run: its absence would change
// what every later run measures.
func startServer(o *options) (func(), error) {
	dir := filepath.Join(o.work, "server")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var bgs []*bg
	stop := func() {
		for _, b := range bgs {
			b.signal(syscall.SIGKILL)
			b.wait(10 * time.Second)
		}
	}
	for i, c := range o.server {
		b, err := startBG(dir, fmt.Sprintf("server-%d", i), nil, strings.Fields(c)...)
		if err != nil {
			stop()
			return nil, fmt.Errorf("start %q: %w", c, err)
		}
		bgs = append(bgs, b)
		logf("server: started %s (pid %d)", c, b.pid())
	}
	// Let them load their code before the first run.
	time.Sleep(2 * time.Second)
	for i, b := range bgs {
		if b.exited() {
			stop()
			return nil, fmt.Errorf("server %q exited at once: %s", o.server[i], tail(b.stderr, 300))
		}
	}
	return stop, nil
}
