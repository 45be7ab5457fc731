package attach

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gprofile/gprofile/internal/testutil"
)

// cpu1Online is the sysfs switch TestSamplerHotplug flips; cpu0 usually
// cannot go offline.
const cpu1Online = "/sys/devices/system/cpu/cpu1/online"

// setCPU1 writes 1 (online) or 0 (offline) to cpu1Online.
func setCPU1(on bool) error {
	v := "0"
	if on {
		v = "1"
	}
	return os.WriteFile(cpu1Online, []byte(v), 0)
}

// takeCPU1 checks that cpu1 can go offline here and arranges for it to
// come back online whatever happens to the test: in t.Cleanup (which runs
// on failure and panic), and from a detached shell that puts it back after
// a minute even if the test binary dies (a timeout).
func takeCPU1(t *testing.T) {
	t.Helper()
	testutil.RequirePrivileges(t)
	f, err := os.OpenFile(cpu1Online, os.O_WRONLY, 0)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EROFS) {
		testutil.SkipKernelFeature(t, "cpu1 cannot go offline here (%v): CPU hotplug needs a second CPU and CONFIG_HOTPLUG_CPU", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if b, err := os.ReadFile(cpu1Online); err != nil || strings.TrimSpace(string(b)) != "1" {
		t.Fatalf("cpu1 is not online before the test (%q, %v)", b, err)
	}
	guard := exec.Command("sh", "-c", "sleep 60; echo 1 > "+cpu1Online)
	guard.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := guard.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := setCPU1(true); err != nil {
			t.Errorf("put cpu1 back online: %v", err)
		}
		syscall.Kill(-guard.Process.Pid, syscall.SIGKILL) // its session: sh and its sleep
		guard.Wait()
	})
}

// monoNs returns CLOCK_MONOTONIC in ns, the clock of Sample.TimeNs.
func monoNs() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // fails only for a bad clock id
	return uint64(ts.Nano())
}

// TestSamplerHotplug takes cpu1 offline 1 s into a whole-system run and
// back online 1 s later, then offline and at once online again (between
// two looks of the watcher) 2.5 s after that, and samples 2.5 s more: cpu1 must
// have samples after each return (the watcher re-opened its perf event),
// and the sampler must report both changes each time. Two spinning
// processes keep both CPUs busy; the idle task is sampled too, so that a
// quiet CPU counts. Not parallel: no other test may run while cpu1 is
// offline.
func TestSamplerHotplug(t *testing.T) {
	takeCPU1(t)
	bin := testutil.BuildC(t, "testdata/spin.c", "-O2", "-fno-omit-frame-pointer")
	for range 2 {
		cmd := exec.Command(bin, "20")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	const hz = 499
	s, err := Open(Config{FrequencyHz: hz, IncludeIdle: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := monoNs()
	var back [2]atomic.Uint64 // when cpu1 came back, CLOCK_MONOTONIC ns
	errc := make(chan error, 1)
	go func() {
		defer cancel()
		errc <- flipCPU1(&back)
	}()
	const bucket = 500 * time.Millisecond
	var counts [2][16]int // per CPU, per half second since start
	var after [2]int      // cpu1 samples in the second before the flap and the last second
	err = s.Run(ctx, func(smp *Sample) {
		if smp.CPU > 1 || smp.TimeNs < start {
			return
		}
		if b := int((smp.TimeNs - start) / uint64(bucket)); b < len(counts[0]) {
			counts[smp.CPU][b]++
		}
		back0, back1 := back[0].Load(), back[1].Load()
		switch {
		case smp.CPU != 1 || back0 == 0:
		case smp.TimeNs > back0+uint64(1300*time.Millisecond) && smp.TimeNs < back0+uint64(2300*time.Millisecond):
			after[0]++
		case back1 != 0 && smp.TimeNs > back1+uint64(1500*time.Millisecond):
			after[1]++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	for b := range 14 {
		fmt.Fprintf(&table, "\n  %4.1f-%4.1f s  cpu0 %4d  cpu1 %4d", float64(b)/2, float64(b+1)/2, counts[0][b], counts[1][b])
	}
	t.Logf("samples per half second (cpu1 back online at %.2f s and %.2f s):%s",
		float64(back[0].Load()-start)/1e9, float64(back[1].Load()-start)/1e9, table.String())
	// The watcher looks once a second: from 1.3 s after cpu1 came back,
	// samples at hz (busy or idle, cpu1 is sampled).
	for i, n := range after {
		if n < hz/10 {
			t.Errorf("%d samples on cpu1 in the second from 1.3 s after it came back (time %d), want at least %d (of %d Hz)", n, i+1, hz/10, hz)
		}
	}
	changes, more := s.Hotplug()
	if more != 0 {
		t.Errorf("%d changes past the first %d", more, len(changes))
	}
	checkHotplugReport(t, changes)
}

// flipCPU1 takes cpu1 offline at 1 s and back at 2 s, then offline and
// back at once at 4.5 s; it returns 2.5 s later. back gets the times cpu1
// came back (CLOCK_MONOTONIC ns).
func flipCPU1(back *[2]atomic.Uint64) error {
	steps := []struct {
		wait time.Duration
		on   bool
	}{{time.Second, false}, {time.Second, true}, {2500 * time.Millisecond, false}, {0, true}}
	for _, st := range steps {
		time.Sleep(st.wait)
		if st.on {
			now := monoNs()
			back[0].CompareAndSwap(0, now)
			back[1].Store(now)
		}
		if err := setCPU1(st.on); err != nil {
			return fmt.Errorf("set cpu1 online %v: %w", st.on, err)
		}
	}
	time.Sleep(2500 * time.Millisecond)
	return nil
}

// checkHotplugReport checks that changes say cpu1 went offline, then came
// back, and that the summary says it was re-attached.
func checkHotplugReport(t *testing.T, changes []CPUChange) {
	t.Helper()
	t.Logf("hotplug report: %v", changes)
	var got []string
	for _, c := range changes {
		if c.CPU == 1 {
			got = append(got, fmt.Sprintf("online=%v", c.Online))
		}
	}
	want := []string{"online=false", "online=true", "online=false", "online=true"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("cpu1 changes %q, want %q", got, want)
	}
	lines := SummarizeHotplug(changes)
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "cpu1 went offline at ") || !strings.HasSuffix(lines[0], ": re-attached") {
		t.Errorf("summary %q, want one line: cpu1 went offline at …, back at …, offline again at …, back at …: re-attached", lines)
	}
}

// TestSummarizeHotplug: one line per CPU, in the order first seen.
func TestSummarizeHotplug(t *testing.T) {
	s := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	changes := []CPUChange{
		{CPU: 1, At: s(3)},
		{CPU: 2, Online: true, At: s(4)},
		{CPU: 1, Online: true, At: s(5)},
		{CPU: 3, At: s(6)},
		{CPU: 1, At: s(7.04)},
		{CPU: 1, Online: true, At: s(7.04)},
	}
	got := strings.Join(SummarizeHotplug(changes), "\n")
	want := strings.Join([]string{
		"cpu1 went offline at 3.0 s, back at 5.0 s, offline again at 7.0 s, back at 7.0 s: re-attached",
		"cpu2 came online at 4.0 s: sampled from then",
		"cpu3 went offline at 6.0 s: not sampled since",
	}, "\n")
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if lines := SummarizeHotplug(nil); len(lines) != 0 {
		t.Errorf("no changes: got %q, want no lines", lines)
	}
}

// BenchmarkHotplugCheck measures one look of the hotplug watcher when no
// CPU changes (the watcher looks once a second): a read of the online
// list and of every CPU event's time_enabled.
func BenchmarkHotplugCheck(b *testing.B) {
	testutil.RequirePrivileges(b)
	s, err := Open(Config{FrequencyHz: 99})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Enable(); err != nil {
		b.Fatal(err)
	}
	time.Sleep(stallSlack) // time_enabled must not fall behind the first look
	for b.Loop() {
		s.checkCPUs(0)
	}
	b.StopTimer()
	if changes, _ := s.Hotplug(); len(changes) != 0 {
		b.Errorf("changes with no CPU hotplug: %v", changes)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(hotplugInterval.Nanoseconds())*100, "%cpu")
}

// TestHotplugRetry drives the watcher's look by hand, without a hotplug:
// a CPU whose event is gone and whose open fails (a frequency the kernel
// refuses) is missed, said once in -v however many looks fail, and
// sampled again at the first look whose open works.
func TestHotplugRetry(t *testing.T) {
	testutil.RequirePrivileges(t)
	var verbose strings.Builder
	s, err := Open(Config{FrequencyHz: 99})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.cfg.Verbose = &verbose
	if err := s.Enable(); err != nil {
		t.Fatal(err)
	}
	cpus := s.CPUs()
	cpu := cpus[len(cpus)-1]
	s.mu.Lock()
	s.dropCPU(cpu, 0)
	s.mu.Unlock()
	s.cfg.FrequencyHz = 1 << 40
	time.Sleep(stallSlack) // the other events' time_enabled must not fall behind
	for range 3 {
		s.checkCPUs(time.Second)
	}
	if got := s.MissedCPUs(); !slices.Equal(got, []int{cpu}) {
		t.Errorf("missed cpus %v, want [%d]", got, cpu)
	}
	if n := strings.Count(verbose.String(), fmt.Sprintf("cpu%d is online but not sampled yet", cpu)); n != 1 {
		t.Errorf("%d lines about the failed opens in -v, want 1:\n%s", n, verbose.String())
	}
	s.cfg.FrequencyHz = 99
	s.checkCPUs(2 * time.Second)
	if got := s.MissedCPUs(); len(got) != 0 {
		t.Errorf("missed cpus %v after the open works", got)
	}
	if got := s.CPUs(); !slices.Equal(got, cpus) {
		t.Errorf("cpus %v, want %v", got, cpus)
	}
	changes, _ := s.Hotplug()
	want := []CPUChange{{CPU: cpu}, {CPU: cpu, Online: true, At: 2 * time.Second}}
	if !slices.Equal(changes, want) {
		t.Errorf("changes %v, want %v", changes, want)
	}
}
