package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The configurations, in table order.
var configs = []string{"none", "floor", "perf", "perf-dwarf", "bpftrace", "bcc", "gprofile-fp", "gprofile"}

// isPerf reports whether cfg is one of perf's configurations (perf
// record, then perf report).
func isPerf(cfg string) bool { return cfg == "perf" || cfg == "perf-dwarf" }

// perfCallGraph returns perf record's call-graph flags for cfg: -g
// (frame pointers), or --call-graph dwarf (8 KiB of stack per sample,
// unwound by perf report).
func perfCallGraph(cfg string) []string {
	if cfg == "perf-dwarf" {
		return []string{"--call-graph", "dwarf"}
	}
	return []string{"-g"}
}

// perfRecordArgs returns perf record's arguments (after "record") for
// cfg at hz: the cpu-clock event on every CPU, with cfg's call graph,
// the same in the rounds, the captures and the long run.
func perfRecordArgs(cfg string, hz int) []string {
	return append([]string{"record", "-e", "cpu-clock", "-F", strconv.Itoa(hz), "-a"}, perfCallGraph(cfg)...)
}

// paths are the programs the harness runs.
type paths struct {
	workload, floor, gprofile, perf, bpftrace, bcc string
	bccEnv                                         []string // BCC_KERNEL_SOURCE when needed
}

// session is one profiler run in the background: started, attached, and
// after the workload, stopped and post-processed.
type session struct {
	cfg   string
	hz    int
	dir   string
	p     *paths
	main  *bg
	post  *bg       // perf report
	progs []progRef // perf_event BPF programs (not for perf)
	ctl   *os.File  // perf --control fifo
	ack   *os.File
}

const startLimit = 60 * time.Second

// startProfiler starts cfg at hz and returns once it samples.
func startProfiler(cfg string, hz int, dir string, p *paths, maxSecs int) (*session, error) {
	s := &session{cfg: cfg, hz: hz, dir: dir, p: p}
	f := strconv.Itoa(hz)
	var err error
	switch cfg {
	case "floor":
		s.main, err = startBG(dir, cfg, nil, p.floor, "-f", f)
	case "gprofile", "gprofile-fp":
		args := []string{p.gprofile, "--sw-event", "-f", f, "-d", strconv.Itoa(maxSecs), "-o", filepath.Join(dir, "out.pb.gz")}
		if cfg == "gprofile-fp" {
			// gprofile's frame-pointer walk, beside its default
			// (--call-graph dwarf): what the stack copy costs.
			args = append(args, "--call-graph", "fp")
		}
		s.main, err = startBG(dir, cfg, nil, args...)
	case "bpftrace":
		s.main, err = startBG(dir, cfg, nil, p.bpftrace, "-e",
			"profile:hz:"+f+" { @[kstack, ustack, comm] = count(); }")
	case "bcc":
		s.main, err = startBG(dir, cfg, p.bccEnv, p.bcc, "-F", f, "-f")
	case "perf", "perf-dwarf":
		return s, s.startPerf()
	default:
		return nil, fmt.Errorf("unknown configuration %q", cfg)
	}
	if err != nil {
		return nil, err
	}
	if s.progs, err = waitBPFReady(s.main, startLimit); err != nil {
		s.main.signal(syscall.SIGKILL)
		return nil, err
	}
	return s, nil
}

// startPerf starts perf record with its events disabled and enables them
// through --control, so sampling starts after perf has finished reading
// /proc (its start-up cost is still counted in its CPU time).
func (s *session) startPerf() error {
	ctl, ack := filepath.Join(s.dir, "perf.ctl"), filepath.Join(s.dir, "perf.ack")
	for _, fifo := range []string{ctl, ack} {
		os.Remove(fifo)
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			return fmt.Errorf("mkfifo %s: %w", fifo, err)
		}
	}
	var err error
	// O_RDWR: opening a FIFO this way does not wait for the other end.
	if s.ctl, err = os.OpenFile(ctl, os.O_RDWR, 0); err != nil {
		return err
	}
	if s.ack, err = os.OpenFile(ack, os.O_RDWR, 0); err != nil {
		return err
	}
	args := perfRecordArgs(s.cfg, s.hz)
	args = append(args, "-o", filepath.Join(s.dir, "perf.data"), "--control", "fifo:"+ctl+","+ack, "-D", "-1")
	s.main, err = startBG(s.dir, s.cfg, nil, append([]string{s.p.perf}, args...)...)
	if err != nil {
		return err
	}
	if _, err := s.ctl.WriteString("enable\n"); err != nil {
		return err
	}
	got := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(s.ack).ReadString('\n')
		got <- line
	}()
	select {
	case line := <-got:
		if strings.TrimSpace(line) != "ack" {
			return fmt.Errorf("perf --control answered %q", line)
		}
	case <-time.After(startLimit):
		s.main.signal(syscall.SIGKILL)
		return fmt.Errorf("perf did not enable its events: %s", tail(s.main.stderr, 300))
	}
	return nil
}

// finish stops the profiler and runs what a user must run to see stacks
// (perf report for perf).
func (s *session) finish() error {
	if s.ctl != nil {
		defer s.ctl.Close()
		defer s.ack.Close()
	}
	if err := s.main.stop(120 * time.Second); err != nil {
		return err
	}
	if !isPerf(s.cfg) {
		return nil
	}
	var err error
	s.post, err = runFG(s.dir, "perf-report", 600*time.Second, nil, s.p.perf, "report",
		"--stdio", "-i", filepath.Join(s.dir, "perf.data"))
	return err
}

// cost returns the CPU seconds and peak RSS (KiB) of the whole profiler,
// post-processing included.
func (s *session) cost() (cpu float64, rss int64) {
	cpu, rss = s.main.rusage()
	if s.post != nil {
		c, r := s.post.rusage()
		cpu += c
		rss = max(rss, r)
	}
	return cpu, rss
}

var (
	reGprofile   = regexp.MustCompile(`gprofile: (\d+) samples \((\d+) lost\)`)
	rePerfRecord = regexp.MustCompile(`\((\d+) samples\)`)
	rePerfLost   = regexp.MustCompile(`(?m)^# Total Lost Samples: (\d+)`)
	reBpftrace   = regexp.MustCompile(`(?m)\]: (\d+)$`)
	reBCCFolded  = regexp.MustCompile(`(?m) (\d+)$`)
	reBCCMissing = regexp.MustCompile(`WARNING: (\d+) stack traces`)
)

// sampledSecs returns how long the profiler says it sampled (gprofile's
// summary line, 0.1 s resolution), or 0 when it does not say.
func (s *session) sampledSecs() float64 {
	if s.cfg != "gprofile" && s.cfg != "gprofile-fp" {
		return 0
	}
	if m := reElapsed.FindStringSubmatch(readFile(s.main.stderr)); m != nil {
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	return 0
}

// samples returns the samples the profiler delivered and those it lost
// (-1: it does not say). floor delivers its program runs.
func (s *session) samples(runs uint64) (delivered, lost int64) {
	switch s.cfg {
	case "floor":
		return int64(runs), -1
	case "gprofile", "gprofile-fp":
		if m := reGprofile.FindStringSubmatch(readFile(s.main.stderr)); m != nil {
			return atoi(m[1]), atoi(m[2])
		}
	case "perf", "perf-dwarf":
		delivered, lost = -1, -1
		if m := rePerfRecord.FindStringSubmatch(readFile(s.main.stderr)); m != nil {
			delivered = atoi(m[1])
		}
		if m := rePerfLost.FindStringSubmatch(readFile(s.post.stdout)); m != nil {
			lost = atoi(m[1])
		}
		return delivered, lost
	case "bpftrace":
		return sumMatches(reBpftrace, readFile(s.main.stdout)), -1
	case "bcc":
		lost = 0
		if m := reBCCMissing.FindStringSubmatch(readFile(s.main.stderr)); m != nil {
			lost = atoi(m[1])
		}
		return sumMatches(reBCCFolded, readFile(s.main.stdout)), lost
	}
	return -1, -1
}

func sumMatches(re *regexp.Regexp, text string) int64 {
	var n int64
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		n += atoi(m[1])
	}
	return n
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// captureArgv is the command line of a 1-second capture that ends with a
// symbolized result, for "time to result". perf needs a second command.
func captureArgv(cfg string, hz int, dir string, p *paths) (argvs [][]string, env []string) {
	f := strconv.Itoa(hz)
	switch cfg {
	case "perf", "perf-dwarf":
		data := filepath.Join(dir, "cap.data")
		rec := append([]string{p.perf}, perfRecordArgs(cfg, hz)...)
		return [][]string{
			append(rec, "-o", data, "--", "sleep", "1"),
			{p.perf, "report", "--stdio", "-i", data},
		}, nil
	case "bpftrace":
		return [][]string{{p.bpftrace, "-e",
			"profile:hz:" + f + " { @[kstack, ustack, comm] = count(); } interval:s:1 { exit(); }"}}, nil
	case "bcc":
		return [][]string{{p.bcc, "-F", f, "-f", "1"}}, p.bccEnv
	case "gprofile":
		return [][]string{{p.gprofile, "--sw-event", "-f", f, "-d", "1", "-o", filepath.Join(dir, "cap.pb.gz")}}, nil
	}
	return nil, nil
}
