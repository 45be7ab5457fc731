package attach

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/gprofile/gprofile/internal/testutil"
	"golang.org/x/sys/unix"
)

// mapping is one line of /proc/PID/maps: [start, end) and its path.
type mapping struct {
	start, end uint64
	path       string
}

func readMaps(t *testing.T, pid int) []mapping {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ms []mapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		lo, hi, _ := strings.Cut(fields[0], "-")
		start, _ := strconv.ParseUint(lo, 16, 64)
		end, _ := strconv.ParseUint(hi, 16, 64)
		m := mapping{start: start, end: end}
		if len(fields) >= 6 {
			m.path = fields[5]
		}
		ms = append(ms, m)
	}
	return ms
}

// readMapsLoaded reads /proc/PID/maps once the dynamic loader has mapped
// libc, failing the test when it has not within 30 s.
func readMapsLoaded(t *testing.T, pid int) []mapping {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		ms := readMaps(t, pid)
		for _, m := range ms {
			if strings.Contains(m.path, "/libc.so") {
				return ms
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d maps no libc after 30 s", pid)
		}
	}
}

func findMapping(ms []mapping, addr uint64) (mapping, bool) {
	for _, m := range ms {
		if addr >= m.start && addr < m.end {
			return m, true
		}
	}
	return mapping{}, false
}

// runDWARF samples pid for a second with CallGraphDWARF (bounded by the
// VMA with byVMA; with bounded, by the program older kernels load) and
// calls fn for each of its samples.
func runDWARF(t *testing.T, pid int, byVMA, bounded bool, fn func(*Sample)) Counters {
	t.Helper()
	s, err := Open(Config{FrequencyHz: 499, PIDs: []uint32{uint32(pid)}, CallGraph: CallGraphDWARF, StackBoundByVMA: byVMA, boundedCopy: bounded})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if want := wantProgram(bounded); s.program != want {
		t.Fatalf("loaded program %s, want %s", s.program, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.Run(ctx, fn); err != nil {
		t.Fatal(err)
	}
	c, err := s.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startSpin builds testdata/spin.c without frame pointers and starts it
// spinning in user mode for 20 s; the test's cleanup kills it.
func startSpin(t *testing.T) (bin string, cmd *exec.Cmd) {
	t.Helper()
	bin = testutil.BuildC(t, "testdata/spin.c", "-O2", "-fomit-frame-pointer")
	cmd = exec.Command(bin, "20")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return bin, cmd
}

// TestSamplerDWARFUser samples a workload spinning in user mode with
// CallGraphDWARF: every sample has the user registers (ip in the
// executable, sp in [stack]), a window from sp to the end of the stack
// (the page above [stack] is unmapped; with StackBoundByVMA, exactly the
// VMA's end), or to a page that faulted above the process's first stack
// pointer (/proc/PID/stat startstack: exec leaves a random gap of up to
// 8 KiB, arch_align_stack, between the argument strings and the tables
// below them, which nothing may have touched), that holds a return
// address into the executable, and no frame-pointer IPs.
func TestSamplerDWARFUser(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin, cmd := startSpin(t)
	maps := readMapsLoaded(t, cmd.Process.Pid)
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command's closing parenthesis start at field 3;
	// startstack is field 28.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	startStack, err := strconv.ParseUint(fields[28-3], 10, 64)
	if err != nil || startStack == 0 {
		t.Fatalf("/proc/PID/stat startstack %q: %v", fields[28-3], err)
	}
	for _, bounded := range []bool{false, true} {
		for _, byVMA := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/byVMA=%v", wantProgram(bounded), byVMA), func(t *testing.T) {
				checkDWARFUser(t, cmd.Process.Pid, bin, maps, startStack, byVMA, bounded)
			})
		}
	}
}

// wantProgram is the sampling program Open loads with CallGraphDWARF:
// profile_loop where the kernel has bpf_loop, unless bounded.
func wantProgram(bounded bool) string {
	if !bounded && features.HaveProgramHelper(ebpf.PerfEvent, asm.FnLoop) == nil {
		return "profile_loop"
	}
	return "profile"
}

func checkDWARFUser(t *testing.T, pid int, bin string, maps []mapping, startStack uint64, byVMA, bounded bool) {
	var n, regs, ipInExe, spInStack, toVMAEnd, retAddr, fpIPs int
	c := runDWARF(t, pid, byVMA, bounded, func(smp *Sample) {
		n++
		if len(smp.UserIPs) != 0 {
			fpIPs++
		}
		if smp.Flags&FlagUserRegs == 0 {
			return
		}
		regs++
		if m, ok := findMapping(maps, smp.Regs[16]); ok && m.path == bin {
			ipInExe++
		}
		st, ok := findMapping(maps, smp.Regs[7])
		if !ok || st.path != "[stack]" {
			return
		}
		spInStack++
		end := smp.Regs[7] + uint64(len(smp.Stack))
		if end == st.end || !byVMA && end > st.end || smp.Flags&FlagWindowFault != 0 && end%4096 == 0 && end > startStack {
			toVMAEnd++
		}
		for i := 0; i+8 <= len(smp.Stack); i += 8 {
			if m, ok := findMapping(maps, binary.NativeEndian.Uint64(smp.Stack[i:])); ok && m.path == bin {
				retAddr++
				break
			}
		}
	})
	t.Logf("%d samples: %d with regs, ip in the executable %d, sp in [stack] %d, window to the VMA end %d, with a return address %d; counters %+v",
		n, regs, ipInExe, spInStack, toVMAEnd, retAddr, c)
	if n < 200 {
		t.Fatalf("%d samples of a spinning workload in 1 s at 499 Hz", n)
	}
	for _, check := range []struct {
		what string
		got  int
	}{{"user registers", regs}, {"ip in the executable", ipInExe}, {"sp in [stack]", spInStack},
		{"a window up to the stack VMA's end (or the gap above startstack)", toVMAEnd}, {"a return address into the executable in the window", retAddr}} {
		if check.got < n*95/100 {
			t.Errorf("%d of %d samples have %s", check.got, n, check.what)
		}
	}
	if fpIPs != 0 {
		t.Errorf("%d samples carry frame-pointer IPs in dwarf mode", fpIPs)
	}
	if c.WindowBytes == 0 || c.Lost != 0 {
		t.Errorf("counters %+v: want window bytes and no loss", c)
	}
}

// TestSamplerDWARFKernel samples a workload that spends its time in
// system calls: samples taken in kernel mode still get the user registers
// (those saved at the syscall's entry: ip in libc, sp in [stack]).
func TestSamplerDWARFKernel(t *testing.T) {
	testutil.RequirePrivileges(t)
	cmd := exec.Command("dd", "if=/dev/zero", "of=/dev/null", "bs=1M", "count=100000000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	maps := readMapsLoaded(t, cmd.Process.Pid)
	var inKernel, regs, ipInLibc, spInStack int
	runDWARF(t, cmd.Process.Pid, false, false, func(smp *Sample) {
		if len(smp.KernelIPs) == 0 {
			return
		}
		inKernel++
		if smp.Flags&FlagUserRegs == 0 {
			return
		}
		regs++
		if m, ok := findMapping(maps, smp.Regs[16]); ok && strings.Contains(m.path, "/libc.so") {
			ipInLibc++
		}
		if m, ok := findMapping(maps, smp.Regs[7]); ok && m.path == "[stack]" && len(smp.Stack) > 0 {
			spInStack++
		}
	})
	t.Logf("%d kernel-mode samples: %d with regs, ip in libc %d, sp in [stack] with a window %d", inKernel, regs, ipInLibc, spInStack)
	if inKernel < 100 {
		t.Fatalf("%d kernel-mode samples of dd in 1 s at 499 Hz", inKernel)
	}
	if regs < inKernel*95/100 || ipInLibc < inKernel*95/100 || spInStack < inKernel*95/100 {
		t.Errorf("of %d kernel-mode samples: %d with regs, %d with ip in libc, %d with sp in [stack]", inKernel, regs, ipInLibc, spInStack)
	}
}

// TestSamplerDWARFGoSwitch samples a Go program that spends its time in
// time.Now, with both sampling programs (profile_loop where the kernel
// has bpf_loop, and profile): time.now calls the vDSO on the g0 stack,
// so most samples copy the goroutine's stack too (FlagStackSwitch,
// go_switched_sp), and that copy ends where the goroutine's
// frame-pointer chain does (fp_chain), a few frames above its sp, not at
// the window's end.
func TestSamplerDWARFGoSwitch(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := testutil.BuildGo(t, "../../cmd/gprofile/testdata/dwarf/gonow.go")
	cmd := exec.Command(bin, "20")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for _, bounded := range []bool{false, true} {
		t.Run(wantProgram(bounded), func(t *testing.T) {
			var regs, switched, chainEnded int
			runDWARF(t, cmd.Process.Pid, false, bounded, func(smp *Sample) {
				if smp.Flags&FlagUserRegs == 0 {
					return
				}
				regs++
				if smp.Flags&FlagStackSwitch == 0 {
					return
				}
				switched++
				if second := len(smp.Stack) - int(smp.SwitchOff); second > 0 && second < 1024 && smp.Flags&FlagWindowMax == 0 {
					chainEnded++
				}
			})
			t.Logf("%d samples with regs: %d switched stacks, %d of them with the goroutine's window ended by its chain", regs, switched, chainEnded)
			if regs < 200 {
				t.Fatalf("%d samples with registers of a spinning Go program in 1 s at 499 Hz", regs)
			}
			if switched < regs/2 {
				t.Errorf("%d of %d samples switched stacks, want at least half", switched, regs)
			}
			if chainEnded < switched*95/100 {
				t.Errorf("%d of %d switched samples have a goroutine window ended by its frame-pointer chain", chainEnded, switched)
			}
		})
	}
}

// TestSamplerStackTops: with Config.StackTops, a thread's stack top set
// by SetStackTop ends its copies there (FlagWindowTop, exactly top - sp
// bytes); a top at or below sp changes nothing; DeleteStackTop brings the
// whole window back.
func TestSamplerStackTops(t *testing.T) {
	testutil.RequirePrivileges(t)
	_, cmd := startSpin(t)
	pid := uint32(cmd.Process.Pid)
	s, err := Open(Config{FrequencyHz: 499, PIDs: []uint32{pid}, CallGraph: CallGraphDWARF, StackTops: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const above = 200 // bytes above sp for the top: less than the stack above it
	// Phases: 0 whole windows; 1 a top below every sp; 2 a top just
	// above sp; 3 deleted. A sample counts in the phase in force when it
	// was taken (its TimeNs against CLOCK_MONOTONIC after the map
	// update), since the ring buffer holds samples taken before and the
	// reader takes them in batches; one taken during the update (after
	// the clock read before it, before the one after) may have either
	// top, and counts in neither. The next phase begins once the current
	// one has counted phaseLen samples, so each phase counts that many
	// however the reader batches them.
	const phaseLen = 150
	var phase int
	var top uint64
	var since [4]uint64    // CLOCK_MONOTONIC ns at each phase's start
	var updating [4]uint64 // CLOCK_MONOTONIC ns before its map update
	type tally struct{ samples, flagged, exact, whole int }
	var got [4]tally
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = s.Run(ctx, func(smp *Sample) {
		if smp.PID != pid || smp.Flags&FlagUserRegs == 0 || phase > 3 {
			return
		}
		sp := smp.Regs[7]
		for i := 1; i < 4; i++ {
			if updating[i] != 0 && smp.TimeNs > updating[i] && (since[i] == 0 || smp.TimeNs <= since[i]) {
				return // taken during an update
			}
		}
		p := 0
		for i := 1; i < 4 && since[i] != 0 && smp.TimeNs > since[i]; i++ {
			p = i
		}
		g := &got[p]
		g.samples++
		if smp.Flags&FlagWindowTop != 0 {
			g.flagged++
		}
		if end := sp + uint64(len(smp.Stack)); end == top {
			g.exact++
		}
		if len(smp.Stack) > 1024 {
			g.whole++
		}
		if p != phase || g.samples < phaseLen {
			return
		}
		phase++
		if phase < 4 {
			updating[phase] = monotonicNs(t)
		}
		var uerr error
		switch phase {
		case 1:
			uerr = s.SetStackTop(smp.TID, sp-4096)
		case 2:
			top = sp + above
			uerr = s.SetStackTop(smp.TID, top)
		case 3:
			uerr = s.DeleteStackTop(smp.TID)
		case 4:
			cancel()
		}
		if uerr != nil {
			t.Error(uerr)
		}
		if phase < 4 {
			since[phase] = monotonicNs(t)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("by phase (whole, top below sp, top at sp+%d, deleted): %+v", above, got)
	for i, g := range got {
		if g.samples < phaseLen {
			t.Fatalf("phase %d: %d samples in 10 s, want %d", i, g.samples, phaseLen)
		}
		if i == 2 {
			// The spin loop's sp moves little: most copies end at the top.
			if g.flagged < g.samples*9/10 || g.exact < g.samples*9/10 || g.whole != 0 {
				t.Errorf("top set: %+v; want nearly every copy flagged and ended at the top, none whole", g)
			}
			continue
		}
		if g.flagged != 0 || g.whole != g.samples {
			t.Errorf("phase %d (no top in effect): %+v; want whole windows, none flagged", i, g)
		}
	}
	if err := s.DeleteStackTop(12345678); err != nil {
		t.Errorf("deleting a top never set: %v", err)
	}
	if n := s.StackTopsCap(); n < minStackTops || n > maxStackTops {
		t.Errorf("StackTopsCap() = %d; want %d to %d", n, minStackTops, maxStackTops)
	}
}

// TestStackTopsEntries: the stack_tops map holds four entries a running
// thread and 256 a CPU, as a power of two within its bounds; the threads
// running are read from /proc/loadavg.
func TestStackTopsEntries(t *testing.T) {
	for _, c := range []struct {
		threads, ncpu int
		want          uint32
	}{
		{1, 1, minStackTops}, {300, 2, 2048}, {256, 2, minStackTops}, {257, 2, 2048},
		{100, 64, maxStackTops}, {10, 16, 4096}, {100000, 2, maxStackTops},
	} {
		if got := stackTopsEntries(c.threads, c.ncpu); got != c.want {
			t.Errorf("stackTopsEntries(%d threads, %d CPUs) = %d, want %d", c.threads, c.ncpu, got, c.want)
		}
	}
	if n := runningThreads(); n <= 1 || n == maxStackTops {
		t.Errorf("runningThreads() = %d: /proc/loadavg did not give this test's threads", n)
	}
}

// monotonicNs is CLOCK_MONOTONIC in ns, the clock of Sample.TimeNs.
func monotonicNs(t *testing.T) uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return uint64(ts.Nano())
}

// TestStackTopDroppedAtExec: a process's stack top goes when it execs
// (the BPF program's exec tracepoint deletes it), before the reader reads
// the exec record: the new program's stack is elsewhere, and a stale top
// would cut its first samples. Sampler.Run is not called, so no reader
// could have deleted it.
func TestStackTopDroppedAtExec(t *testing.T) {
	testutil.RequirePrivileges(t)
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatalf("sleep: %v", err)
	}
	cmd := exec.Command("sh", "-c", "read line; exec "+sleep+" 10")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := uint32(cmd.Process.Pid)
	s, err := Open(Config{FrequencyHz: 99, PIDs: []uint32{pid}, CallGraph: CallGraphDWARF, StackTops: true, ReportExits: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const top = 0x7fff12345000
	if err := s.SetStackTop(pid, top); err != nil {
		t.Fatal(err)
	}
	var got uint64
	if err := s.objs.StackTops.Lookup(pid, &got); err != nil || got != top {
		t.Fatalf("stack top before the exec: %#x, %v; want %#x", got, err, uint64(top))
	}
	fmt.Fprintln(stdin, "go")
	deadline := time.Now().Add(5 * time.Second)
	for {
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); strings.HasSuffix(exe, "/sleep") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the shell did not exec sleep within 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// /proc/PID/exe names the new program a little before the exec
	// tracepoint (sched_process_exec) fires: wait for it, within a second.
	err = s.objs.StackTops.Lookup(pid, &got)
	for end := time.Now().Add(time.Second); err == nil && time.Now().Before(end); err = s.objs.StackTops.Lookup(pid, &got) {
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("stack top a second after the exec: %#x, %v; want none", got, err)
	}
}

// TestLoopRefusedLoadsProfile: where the kernel refuses profile_loop (no
// bpf_loop before Linux 5.17; here a program the verifier refuses stands
// in for it), the sampler loads profile, the bounded copy, and says why
// in the verbose output.
func TestLoopRefusedLoadsProfile(t *testing.T) {
	testutil.RequirePrivileges(t)
	spec, err := loadProfile()
	if err != nil {
		t.Fatal(err)
	}
	spec.Programs["profile_loop"].Instructions = asm.Instructions{asm.Return()} // R0 never set
	var verbose bytes.Buffer
	s := &Sampler{cfg: Config{CallGraph: CallGraphDWARF, Verbose: &verbose}}
	if err := s.loadObjects(spec); err != nil {
		t.Fatal(err)
	}
	defer s.objs.close()
	if s.program != "profile" || s.objs.Profile == nil {
		t.Errorf("loaded %s (%v), want profile", s.program, s.objs.Profile)
	}
	if !strings.Contains(verbose.String(), "profile_loop refused") {
		t.Errorf("verbose output %q does not say profile_loop was refused", verbose.String())
	}
}
