package main

// Hostile and odd input, end to end: processes that exit mid-run, that
// have 10,000 threads or 5,000 mappings, binaries at paths the kernel
// escapes in /proc/PID/maps, and kernel symbols hidden by kptr_restrict.
// Workloads are built from testdata/hostile/*.c into t.TempDir().

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gprofile/gprofile/internal/testutil"
)

// buildHostile compiles testdata/hostile/NAME.c with frame pointers (and
// the extra flags) into t.TempDir().
func buildHostile(t *testing.T, name string, flags ...string) string {
	t.Helper()
	args := append([]string{"-O2", "-g", "-fno-omit-frame-pointer", "-pthread"}, flags...)
	return testutil.BuildC(t, filepath.Join("testdata", "hostile", name+".c"), args...)
}

// hostileProc is a running test workload that said "pid=N ..." on stdout.
type hostileProc struct {
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	pid      int
	line     string        // its first line of output
	done     chan struct{} // closed once it exited and was reaped
	exitedAt time.Time     // when it was reaped; valid after done
}

// startHostile starts bin and waits (up to 30 s) for its first line of
// output. The workload is killed and reaped when the test ends.
func startHostile(t *testing.T, bin string, args ...string) *hostileProc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &hostileProc{cmd: cmd, stdin: stdin, pid: cmd.Process.Pid, done: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- line
		// Reap it as soon as it exits (Wait closes stdout, so only now).
		cmd.Wait()
		w.exitedAt = time.Now()
		close(w.done)
	}()
	t.Cleanup(w.stop)
	select {
	case w.line = <-lines:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s said nothing in 30 s", bin)
	}
	if !strings.HasPrefix(w.line, "pid=") {
		t.Fatalf("%s said %q; stderr: %s", bin, w.line, stderr.Bytes())
	}
	return w
}

// stop kills the workload and waits until it is reaped.
func (w *hostileProc) stop() {
	w.cmd.Process.Kill()
	<-w.done
}

// gpProc is a gprofile started in the background.
type gpProc struct {
	cmd            *exec.Cmd
	args           []string
	stdout, stderr bytes.Buffer
	start          time.Time
}

// gpResult is how a gprofile run ended.
type gpResult struct {
	stdout, stderr []byte
	code           int
	maxRSS         int64 // peak resident set size, bytes (getrusage ru_maxrss)
	wall           time.Duration
}

// startMeasured starts gprofile with args; it is killed if the test ends
// first.
func startMeasured(t *testing.T, args ...string) *gpProc {
	t.Helper()
	r := &gpProc{cmd: exec.Command(buildGprofile(t), args...), args: args}
	r.cmd.Stdout, r.cmd.Stderr = &r.stdout, &r.stderr
	r.start = time.Now()
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			r.cmd.Process.Kill()
			r.cmd.Wait()
		}
	})
	return r
}

// wait waits for gprofile to exit and returns its output, exit status
// and peak memory (from the kernel's accounting of the child: exact, not
// sampled).
func (r *gpProc) wait(t *testing.T) gpResult {
	t.Helper()
	err := r.cmd.Wait()
	res := gpResult{stdout: r.stdout.Bytes(), stderr: r.stderr.Bytes(), wall: time.Since(r.start)}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("gprofile %v: %v", r.args, err)
	}
	if ru, ok := r.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		res.maxRSS = ru.Maxrss << 10 // Linux reports KiB
	}
	t.Logf("gprofile %s: exit %d in %.1f s, peak RSS %d MB\nstderr: %s",
		strings.Join(r.args, " "), res.code, res.wall.Seconds(), res.maxRSS>>20, res.stderr)
	if bytes.Contains(res.stderr, []byte("panic:")) || bytes.Contains(res.stderr, []byte("goroutine ")) {
		t.Errorf("gprofile panicked:\n%s", res.stderr)
	}
	return res
}

// runMeasured runs gprofile to the end.
func runMeasured(t *testing.T, args ...string) gpResult {
	t.Helper()
	return startMeasured(t, args...).wait(t)
}

// profileWorkload runs gprofile with args (whose duration is window, at
// hz) while measuring the CPU share of process pid, and returns the
// result and the samples that share should give.
func profileWorkload(t *testing.T, pid int, hz float64, window time.Duration, args ...string) (gpResult, float64) {
	t.Helper()
	cpu := testutil.StartCPU(t, strconv.Itoa(pid))
	res := runMeasured(t, args...)
	return res, cpu.ExpectedSamples(hz, window)
}

// checkCounts wants at least 80% of the expected samples (and enough
// expected to judge), 90% of them with the chain.
func checkCounts(t *testing.T, what string, with, total int, expected float64) {
	t.Helper()
	t.Logf("%d samples, %d of them %s; its CPU share gives %.0f", total, with, what, expected)
	if float64(total) < 0.8*expected || expected < 50 || with*10 < total*9 {
		t.Errorf("%d samples, %d of them %s; want 80%% of the %.0f its CPU share gives (at least 50), and 90%% %s",
			total, with, what, expected, what)
	}
}

// waitUntilSampling waits until gprofile (pid) takes samples: until one
// of its perf-event BPF programs (prog_type 7 in /proc/PID/fdinfo) has run,
// as kernel.bpf_stats_enabled=1 (set here for the test) makes the kernel
// count. It fails the test after 30 s.
func waitUntilSampling(t *testing.T, pid int) {
	t.Helper()
	testutil.SetSysctl(t, "kernel.bpf_stats_enabled", "1")
	deadline := time.Now().Add(30 * time.Second)
	for ; time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); l != "anon_inode:bpf-prog" {
				continue
			}
			info, _ := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd.Name()))
			if progRan(string(info), 7) { // BPF_PROG_TYPE_PERF_EVENT
				return
			}
		}
	}
	t.Fatal("gprofile's BPF program took no sample in 30 s")
}

// progRan reports whether the fdinfo of a BPF program says it is of type
// typ and has run (run_cnt, counted under kernel.bpf_stats_enabled).
func progRan(fdinfo string, typ int) bool {
	var ptype, runs int = -1, 0
	for _, line := range strings.Split(fdinfo, "\n") {
		k, v, _ := strings.Cut(line, ":")
		n, err := strconv.Atoi(strings.TrimSpace(v))
		switch {
		case err != nil:
		case k == "prog_type":
			ptype = n
		case k == "run_cnt":
			runs = n
		}
	}
	return ptype == typ && runs > 0
}

// commSamples sums the counts of folded lines of one comm, and of those
// with chain (in order, others may sit between).
func commSamples(t *testing.T, folded []byte, comm string, chain ...string) (with, total int) {
	t.Helper()
	for _, l := range parseFolded(t, folded) {
		if l.frames[0] != comm {
			continue
		}
		total += l.count
		if hasChain(l.frames[1:], chain) {
			with += l.count
		}
	}
	return with, total
}

// TestHostileExitMidRun profiles a process by pid that spins 0.5 s and
// exits while the profile runs 1.5 s: gprofile goes on to the end, exits
// 0, and the samples taken while the process lived keep their names
// (each stack is named when first seen, not at the end).
func TestHostileExitMidRun(t *testing.T) {
	testutil.RequirePrivileges(t)
	w := startHostile(t, buildHostile(t, "brief"), "500")
	gp := startMeasured(t, "-p", strconv.Itoa(w.pid), "-d", "1.5", "-f", "999", "-E")
	waitUntilSampling(t, gp.cmd.Process.Pid)
	if _, err := w.stdin.Write([]byte{'\n'}); err != nil {
		t.Fatal(err)
	}
	res := gp.wait(t)
	if res.code != 0 {
		t.Fatalf("exit %d, want 0", res.code)
	}
	select {
	case <-w.done: // reaped at once: no zombie left for gprofile to read
	default:
		t.Fatal("the workload was still running when gprofile ended; the test proves nothing")
	}
	ru := w.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	t.Logf("the workload used %.2f s of CPU and exited %.2f s before gprofile did",
		cpu.Seconds(), gp.start.Add(res.wall).Sub(w.exitedAt).Seconds())
	with, total := commSamples(t, res.stdout, "brief", "main", "brief_outer", "brief_spin")
	checkCounts(t, "in main;brief_outer;brief_spin", with, total, cpu.Seconds()*999)
}

// TestHostileManyThreads profiles a process of 10,001 threads (two
// spinning), whole-system and by pid: gprofile runs to the end, the
// output parses, the spinning threads are named, and gprofile's peak
// memory stays bounded (nothing is kept per thread).
func TestHostileManyThreads(t *testing.T) {
	testutil.RequirePrivileges(t)
	const threads = 10000
	bin := buildHostile(t, "manythreads")
	began := time.Now()
	w := startHostile(t, bin, strconv.Itoa(threads), "2", "60")
	t.Logf("%d threads running after %.2f s: %s", threads, time.Since(began).Seconds(), strings.TrimSpace(w.line))
	if n := threadCount(t, w.pid); n < threads {
		t.Fatalf("/proc/%d/task holds %d threads, want %d", w.pid, n, threads)
	}
	for _, c := range []struct {
		name   string
		args   []string
		maxRSS int64
	}{
		{"whole system", nil, 200 << 20},
		{"-p", []string{"-p", strconv.Itoa(w.pid)}, 100 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, expected := profileWorkload(t, w.pid, 999, 2*time.Second, append([]string{"-d", "2", "-f", "999", "-E"}, c.args...)...)
			if res.code != 0 {
				t.Fatalf("exit %d, want 0", res.code)
			}
			with, total := commSamples(t, res.stdout, "manythreads", "start_thread", "mt_outer", "mt_spin")
			checkCounts(t, "in start_thread;mt_outer;mt_spin", with, total, expected)
			if res.maxRSS > c.maxRSS {
				t.Errorf("gprofile's peak RSS %d MB, want at most %d MB", res.maxRSS>>20, c.maxRSS>>20)
			}
		})
	}
}

func threadCount(t *testing.T, pid int) int {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(tasks)
}

// TestHostileManyMappings profiles a process with 5,000 executable
// mappings of one file (kept apart so the kernel cannot merge them)
// spinning in a known chain: the chain is named and gprofile takes about
// as long as with one mapping (the same workload with 1, profiled the same
// way just before, on the same machine).
func TestHostileManyMappings(t *testing.T) {
	testutil.RequirePrivileges(t)
	const maps = 5000
	page := filepath.Join(t.TempDir(), "page.bin")
	if err := os.WriteFile(page, bytes.Repeat([]byte{0xc3}, os.Getpagesize()), 0o644); err != nil { // ret, ret, ...
		t.Fatal(err)
	}
	bin := buildHostile(t, "manymaps")
	var wall [2]time.Duration
	for i, n := range []int{1, maps} {
		w := startHostile(t, bin, page, strconv.Itoa(n), "60")
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", w.pid))
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Count(b, []byte(" r-xp 00000000 ")); got < n {
			t.Fatalf("/proc/%d/maps holds %d executable mappings at offset 0, want %d (merged?)", w.pid, got, n)
		}
		res, expected := profileWorkload(t, w.pid, 999, 2*time.Second, "-p", strconv.Itoa(w.pid), "-d", "2", "-f", "999", "-E")
		if res.code != 0 {
			t.Fatalf("%d mappings: exit %d, want 0", n, res.code)
		}
		with, total := commSamples(t, res.stdout, "manymaps", "main", "maps_outer", "maps_spin")
		checkCounts(t, "in main;maps_outer;maps_spin", with, total, expected)
		wall[i] = res.wall
		w.stop()
	}
	// Reading 10,000 lines of maps and naming the chain in them costs
	// milliseconds; a second is room for a loaded machine, and still far
	// from what a per-mapping cost (re-reading maps per sample, opening
	// the file per mapping) would add.
	if extra := wall[1] - wall[0]; extra > time.Second {
		t.Errorf("gprofile -d 2 took %.2f s with %d mappings, %.2f s with 1: want about as long", wall[1].Seconds(), maps, wall[0].Seconds())
	}
}

// oddName is a file name with a space, a newline, a ';' (the folded
// format's separator) and the " (deleted)" suffix the kernel appends to
// deleted files in /proc/PID/maps.
const oddName = "odd name\nwith; newline (deleted)"

// startOddChain copies bin to a directory of its own under oddName, runs
// it, and checks that /proc/PID/maps escapes the name as the kernel does.
func startOddChain(t *testing.T, bin string) (*hostileProc, string) {
	t.Helper()
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), oddName)
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	w := startHostile(t, path, "60")
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", w.pid))
	if err != nil {
		t.Fatal(err)
	}
	// seq_file escapes '\n' in paths as octal "\012"; spaces stay.
	if escaped := strings.ReplaceAll(path, "\n", `\012`); !bytes.Contains(maps, []byte(escaped)) {
		t.Fatalf("/proc/%d/maps does not show %q:\n%s", w.pid, escaped, maps)
	}
	return w, path
}

// checkFoldedFrames fails on frames that the format's separators split
// (parseFolded already fails on a line split by a newline): no frame is
// blank, and every bracketed (unnamed) frame closes its bracket. The
// first frame, the comm, must start with prefix.
func checkFoldedFrames(t *testing.T, folded []byte, prefix string) {
	t.Helper()
	for _, l := range parseFolded(t, folded) {
		if !strings.HasPrefix(l.frames[0], prefix) {
			t.Errorf("comm %q, want %q...", l.frames[0], prefix)
		}
		for _, f := range l.frames {
			f = strings.TrimSuffix(f, "_[k]")
			if strings.TrimSpace(f) == "" || strings.HasPrefix(f, "[") != strings.HasSuffix(f, "]") {
				t.Errorf("frame %q split or unescaped in %q", f, l.frames)
			}
		}
	}
}

// TestHostileOddPath runs a binary whose path holds a space, a newline,
// a ';' and " (deleted)": with symbols its chain is named; stripped and
// then really deleted its frames are unnamed, counted with a reason, and
// never break the folded format. The process name (comm, "odd name\nwith; ")
// holds the newline and ';' too.
func TestHostileOddPath(t *testing.T) {
	testutil.RequirePrivileges(t)
	t.Run("named", func(t *testing.T) {
		w, _ := startOddChain(t, testutil.BuildC(t, "testdata/chain.c", "-O2", "-g", "-fno-omit-frame-pointer"))
		res, expected := profileWorkload(t, w.pid, 999, 1500*time.Millisecond, "-p", strconv.Itoa(w.pid), "-d", "1.5", "-f", "999", "-E")
		if res.code != 0 {
			t.Fatalf("exit %d, want 0", res.code)
		}
		checkFoldedFrames(t, res.stdout, "odd name")
		with, total := samplesWith(t, res.stdout, "main", "chain_a", "chain_b", "chain_c")
		checkCounts(t, "in main;chain_a;chain_b;chain_c", with, total, expected)
	})
	t.Run("stripped and deleted", func(t *testing.T) {
		w, path := startOddChain(t, testutil.BuildC(t, "testdata/chain.c", "-O2", "-s", "-fno-omit-frame-pointer"))
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		res, expected := profileWorkload(t, w.pid, 999, 1500*time.Millisecond, "-p", strconv.Itoa(w.pid), "-d", "1.5", "-f", "999", "-E")
		if res.code != 0 {
			t.Fatalf("exit %d, want 0", res.code)
		}
		checkFoldedFrames(t, res.stdout, "odd name")
		unnamed, total := 0, 0
		for _, l := range parseFolded(t, res.stdout) {
			total += l.count
			for _, f := range l.frames[1:] {
				if strings.HasPrefix(f, "[odd name") && strings.Contains(f, "+0x") {
					unnamed += l.count
					break
				}
			}
		}
		checkCounts(t, "with an unnamed [odd name...+0x...] frame", unnamed, total, expected)
		if !regexp.MustCompile(`\d+ of \d+ frames unnamed: .*no-symbol \d+`).Match(res.stderr) {
			t.Errorf("stderr does not count the unnamed frames as no-symbol:\n%s", res.stderr)
		}
	})
}

// TestHostileKptrRestrict sets kernel.kptr_restrict=2 (kallsyms shows
// zero addresses even to root) for one run: gprofile runs, says why
// kernel frames have no names, leaves them unnamed (never misnamed), and
// still names user frames. The old value is restored however the test
// ends. Other tests that read /proc/kallsyms during those seconds see it
// hidden too.
func TestHostileKptrRestrict(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := buildHostile(t, "syscalls")
	buildGprofile(t)
	w := startHostile(t, bin, "60")
	restore := testutil.SetSysctl(t, "kernel.kptr_restrict", "2")
	res, expected := profileWorkload(t, w.pid, 999, time.Second, "-d", "1", "-f", "999", "-E")
	restore() // at once: other tests read kallsyms too
	if res.code != 0 {
		t.Fatalf("exit %d, want 0", res.code)
	}
	if !bytes.Contains(res.stderr, []byte("kptr_restrict")) || !bytes.Contains(res.stderr, []byte("kernel-hidden")) {
		t.Errorf("stderr does not mention kptr_restrict and kernel-hidden frames:\n%s", res.stderr)
	}
	kernel, named := 0, 0
	for _, l := range parseFolded(t, res.stdout) {
		for _, f := range l.frames {
			if name, ok := strings.CutSuffix(f, "_[k]"); ok {
				kernel += l.count
				if !strings.HasPrefix(name, "[") {
					named += l.count
				}
			}
		}
	}
	if kernel == 0 || named != 0 {
		t.Errorf("%d kernel frames, %d of them named; want some, all unnamed", kernel, named)
	}
	with, total := commSamples(t, res.stdout, "syscalls", "main", "sys_outer")
	checkCounts(t, "in main;sys_outer", with, total, expected)
}
