package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// clkTck is USER_HZ, the unit of utime and stime in /proc/PID/stat; it is
// 100 on every Linux architecture the benchmark runs on.
const clkTck = 100

// bg is a command started in its own process group, so the harness can
// signal it (and whatever it forks) by pid without touching anything else.
type bg struct {
	name    string
	cmd     *exec.Cmd
	start   time.Time
	done    chan struct{}
	waitErr error
	wall    time.Duration
	stdout  string // path
	stderr  string // path
}

// live holds the process groups started and not yet reaped, for the
// cleanup on SIGINT/SIGTERM.
var live = struct {
	sync.Mutex
	pgids map[int]string
}{pgids: map[int]string{}}

// startBG starts argv with stdout and stderr going to files in dir named
// after name.
func startBG(dir, name string, env []string, argv ...string) (*bg, error) {
	b := &bg{name: name, done: make(chan struct{}),
		stdout: filepath.Join(dir, name+".out"), stderr: filepath.Join(dir, name+".err")}
	outF, err := os.Create(b.stdout)
	if err != nil {
		return nil, err
	}
	errF, err := os.Create(b.stderr)
	if err != nil {
		outF.Close()
		return nil, err
	}
	b.cmd = exec.Command(argv[0], argv[1:]...)
	b.cmd.Stdout, b.cmd.Stderr = outF, errF
	b.cmd.Env = append(os.Environ(), env...)
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	b.start = time.Now()
	if err := b.cmd.Start(); err != nil {
		outF.Close()
		errF.Close()
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	live.Lock()
	live.pgids[b.cmd.Process.Pid] = name
	live.Unlock()
	go func() {
		b.waitErr = b.cmd.Wait()
		b.wall = time.Since(b.start)
		outF.Close()
		errF.Close()
		live.Lock()
		delete(live.pgids, b.cmd.Process.Pid)
		live.Unlock()
		close(b.done)
	}()
	return b, nil
}

// runFG runs argv to the end (at most limit) and returns it reaped.
func runFG(dir, name string, limit time.Duration, env []string, argv ...string) (*bg, error) {
	b, err := startBG(dir, name, env, argv...)
	if err != nil {
		return nil, err
	}
	return b, b.wait(limit)
}

func (b *bg) pid() int { return b.cmd.Process.Pid }

func (b *bg) exited() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the whole process group.
func (b *bg) signal(sig syscall.Signal) {
	if !b.exited() {
		syscall.Kill(-b.pid(), sig)
	}
}

// wait waits for the command to exit, killing its group after limit.
func (b *bg) wait(limit time.Duration) error {
	select {
	case <-b.done:
	case <-time.After(limit):
		b.signal(syscall.SIGKILL)
		<-b.done
		return fmt.Errorf("%s: still running after %v, killed", b.name, limit)
	}
	if b.waitErr != nil {
		return fmt.Errorf("%s: %w (stderr: %s)", b.name, b.waitErr, tail(b.stderr, 300))
	}
	return nil
}

// stop sends SIGINT (what Ctrl-C sends: every profiler here prints its
// result on it) and waits, then SIGKILL after limit. Dying of that SIGINT
// after writing the result (perf re-raises it) is a clean stop.
func (b *bg) stop(limit time.Duration) error {
	b.signal(syscall.SIGINT)
	err := b.wait(limit)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && (ws.Signaled() && ws.Signal() == syscall.SIGINT || ws.ExitStatus() == 130) {
			return nil
		}
	}
	return err
}

// rusage returns user+sys CPU seconds and the peak RSS in KiB of the
// reaped command and its reaped descendants (wait4's rusage).
func (b *bg) rusage() (cpu float64, maxRSSKiB int64) {
	st := b.cmd.ProcessState
	if st == nil {
		return 0, 0
	}
	ru, ok := st.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0, 0
	}
	cpu = float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
	return cpu, ru.Maxrss
}

// killAll kills every live process group (on the harness's own exit).
func killAll() {
	live.Lock()
	defer live.Unlock()
	for pgid := range live.pgids {
		syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

func tail(path string, n int) string {
	s := strings.TrimSpace(readFile(path))
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// tree returns root and every live descendant of it, from /proc/*/stat.
func tree(root int) []int {
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := statFields(pid); len(f) > 1 {
			ppid, _ := strconv.Atoi(f[1])
			parent[pid] = ppid
		}
	}
	var out []int
	for pid := range parent {
		for p := pid; p > 1; p = parent[p] {
			if p == root {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// statFields returns the fields of /proc/PID/stat after the comm, so
// index 0 is the state (field 3) and utime (field 14) is index 11.
func statFields(pid int) []string {
	s := readFile(fmt.Sprintf("/proc/%d/stat", pid))
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// treeCPU returns the user+sys CPU seconds used so far by the live
// processes of root's tree (their threads included).
func treeCPU(root int) float64 {
	var ticks int64
	for _, pid := range tree(root) {
		f := statFields(pid)
		if len(f) > 12 {
			u, _ := strconv.ParseInt(f[11], 10, 64)
			s, _ := strconv.ParseInt(f[12], 10, 64)
			ticks += u + s
		}
	}
	return float64(ticks) / clkTck
}

// progRef is a BPF program of type perf_event held open by a process:
// its fdinfo carries the program's run statistics.
type progRef struct {
	id     int
	fdinfo string
}

type progStats struct{ runNs, runCnt uint64 }

const bpfProgTypePerfEvent = 7

// perfEventProgs lists the perf_event BPF programs held by root's tree,
// one entry per program id, found through /proc/PID/fd and fdinfo.
func perfEventProgs(root int) []progRef {
	seen := map[int]bool{}
	var out []progRef
	for _, pid := range tree(root) {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if l, _ := os.Readlink(filepath.Join(dir, e.Name())); l != "anon_inode:bpf-prog" {
				continue
			}
			info := fmt.Sprintf("/proc/%d/fdinfo/%s", pid, e.Name())
			kv := fdinfo(info)
			if kv["prog_type"] != bpfProgTypePerfEvent || seen[int(kv["prog_id"])] {
				continue
			}
			seen[int(kv["prog_id"])] = true
			out = append(out, progRef{id: int(kv["prog_id"]), fdinfo: info})
		}
	}
	return out
}

func fdinfo(path string) map[string]uint64 {
	kv := map[string]uint64{}
	f, err := os.Open(path)
	if err != nil {
		return kv
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			kv[k] = n
		}
	}
	return kv
}

// readStats sums run_time_ns and run_cnt over progs.
func readStats(progs []progRef) progStats {
	var s progStats
	for _, p := range progs {
		kv := fdinfo(p.fdinfo)
		s.runNs += kv["run_time_ns"]
		s.runCnt += kv["run_cnt"]
	}
	return s
}

// waitBPFReady waits until root's tree holds a perf_event BPF program that
// has run at least once (kernel.bpf_stats_enabled=1 makes run_cnt count):
// the profiler is attached and its events are enabled.
func waitBPFReady(b *bg, limit time.Duration) ([]progRef, error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if b.exited() {
			return nil, fmt.Errorf("%s exited before sampling started: %s", b.name, tail(b.stderr, 400))
		}
		progs := perfEventProgs(b.pid())
		if len(progs) > 0 && readStats(progs).runCnt > 0 {
			return progs, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil, errors.New(b.name + ": no perf_event BPF program ran within " + limit.String())
}

// busyCPU returns the CPU seconds all CPUs spent busy so far (the user,
// nice, system, irq and softirq columns of the cpu line of /proc/stat).
func busyCPU() float64 {
	line, _, _ := strings.Cut(readFile("/proc/stat"), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7} {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += n
	}
	return float64(ticks) / clkTck
}
