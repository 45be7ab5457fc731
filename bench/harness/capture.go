package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// captureConfigs are the profilers timed from start to a symbolized
// result of a 1-second capture.
var captureConfigs = []string{"perf", "perf-dwarf", "bpftrace", "bcc", "gprofile"}

// captureResult is one timed 1-second capture.
type captureResult struct {
	cfg  string
	hz   int
	wall float64 // seconds from start to the result written
	cpu  float64
	err  string
}

// captures times each profiler's 1-second capture, with the workload
// running in the background so there are stacks to symbolize.
func captures(ctx context.Context, o *options, r *report) error {
	dir := filepath.Join(o.work, "captures")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	w, err := startBG(dir, "workload", nil, o.p.workload, "3600")
	if err != nil {
		return err
	}
	defer func() {
		w.signal(syscall.SIGKILL)
		w.wait(10 * time.Second)
	}()
	for rep := 0; rep < o.capReps; rep++ {
		for _, hz := range o.freqs {
			for _, cfg := range captureConfigs {
				if _, skipped := o.skip[cfg]; skipped {
					continue
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
				c := capture(dir, cfg, hz, &o.p)
				logf("capture %-8s %4d Hz: %.2f s to a symbolized result, cpu %.2f s %s", cfg, hz, c.wall, c.cpu, c.err)
				r.caps = append(r.caps, c)
			}
		}
	}
	return nil
}

func capture(dir, cfg string, hz int, p *paths) *captureResult {
	c := &captureResult{cfg: cfg, hz: hz}
	argvs, env := captureArgv(cfg, hz, dir, p)
	start := time.Now()
	for i, argv := range argvs {
		b, err := runFG(dir, fmt.Sprintf("cap-%s-%d", cfg, i), 300*time.Second, env, argv...)
		if err != nil {
			c.err = err.Error()
			return c
		}
		cpu, _ := b.rusage()
		c.cpu += cpu
	}
	c.wall = time.Since(start).Seconds()
	return c
}

var reElapsed = regexp.MustCompile(`lost\) in ([0-9.]+) s`)

// longRun samples with gprofile at 999 Hz for o.longSecs while the
// workload keeps every CPU busy.
func longRun(o *options) (*runResult, error) {
	dir, stop, err := longWorkload(o)
	if err != nil {
		return nil, err
	}
	defer stop()
	logf("long run: gprofile -f 999 -d %d", o.longSecs)
	b, err := runFG(dir, "gprofile", time.Duration(o.longSecs+120)*time.Second, nil,
		o.p.gprofile, "--sw-event", "-f", "999", "-d", strconv.Itoa(o.longSecs), "-o", filepath.Join(dir, "long.pb.gz"))
	if err != nil {
		return nil, err
	}
	res := &runResult{cfg: "gprofile", hz: 999}
	res.cpu, res.rssKiB = b.rusage()
	stderr := readFile(b.stderr)
	m := reGprofile.FindStringSubmatch(stderr)
	if m == nil {
		return nil, fmt.Errorf("no sample count in gprofile's output: %s", tail(b.stderr, 300))
	}
	res.delivered, res.lost = atoi(m[1]), atoi(m[2])
	res.window = float64(o.longSecs)
	if e := reElapsed.FindStringSubmatch(stderr); e != nil {
		res.window, _ = strconv.ParseFloat(e[1], 64)
	}
	logf("long run: %d samples, %d lost, peak RSS %d KiB, cpu %.2f s", res.delivered, res.lost, res.rssKiB, res.cpu)
	return res, nil
}

// longPerfDwarfRun is longRun for perf record --call-graph dwarf and the
// perf report that makes its result, side by side with gprofile's: their
// CPU time summed, the larger peak RSS. Over a long run the fixed costs
// of both matter less than in the 8 s rounds. perf.data (about 8 KiB a
// sample) is removed afterwards.
func longPerfDwarfRun(o *options) (*runResult, error) {
	dir, stop, err := longWorkload(o)
	if err != nil {
		return nil, err
	}
	defer stop()
	data := filepath.Join(dir, "long.data")
	defer os.Remove(data)
	logf("long run: perf record -F 999 -a --call-graph dwarf -- sleep %d, then perf report", o.longSecs)
	limit := time.Duration(o.longSecs+600) * time.Second
	argv := append(append([]string{o.p.perf}, perfRecordArgs("perf-dwarf", 999)...), "-o", data, "--", "sleep", strconv.Itoa(o.longSecs))
	rec, err := runFG(dir, "perf-dwarf", limit, nil, argv...)
	if err != nil {
		return nil, err
	}
	stop() // the report runs alone, as after the rounds' perf runs
	rep, err := runFG(dir, "perf-dwarf-report", limit, nil, o.p.perf, "report", "--stdio", "-i", data)
	if err != nil {
		return nil, err
	}
	res := &runResult{cfg: "perf-dwarf", hz: 999, window: float64(o.longSecs)}
	recCPU, recRSS := rec.rusage()
	repCPU, repRSS := rep.rusage()
	res.cpu, res.rssKiB = recCPU+repCPU, max(recRSS, repRSS)
	m := rePerfRecord.FindStringSubmatch(readFile(rec.stderr))
	if m == nil {
		return nil, fmt.Errorf("no sample count in perf record's output: %s", tail(rec.stderr, 300))
	}
	res.delivered, res.lost = atoi(m[1]), -1
	if l := rePerfLost.FindStringSubmatch(readFile(rep.stdout)); l != nil {
		res.lost = atoi(l[1])
	}
	logf("long run: perf dwarf %d samples, %d lost, peak RSS %d KiB, cpu %.2f s (record %.2f, report %.2f)",
		res.delivered, res.lost, res.rssKiB, res.cpu, recCPU, repCPU)
	return res, nil
}

// longWorkload starts the workload for a long run in the long runs'
// directory, o.work/long, and returns that directory and what stops the
// workload (safe to call twice).
func longWorkload(o *options) (dir string, stop func(), err error) {
	dir = filepath.Join(o.work, "long")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	w, err := startBG(dir, "workload", nil, o.p.workload, strconv.Itoa(o.longSecs+5))
	if err != nil {
		return "", nil, err
	}
	time.Sleep(200 * time.Millisecond)
	var once sync.Once
	return dir, func() {
		once.Do(func() {
			w.signal(syscall.SIGKILL)
			w.wait(10 * time.Second)
		})
	}, nil
}
