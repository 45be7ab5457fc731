package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gprofile/gprofile/internal/symbolize"
	"github.com/gprofile/gprofile/internal/testutil"
	"golang.org/x/sys/unix"
)

// The end-to-end symbolization tests (issue 3, "Name every frame"): each
// builds a workload from testdata/sym/ into t.TempDir(), profiles it
// with gprofile -E at 999 Hz, and requires the workload's expected frames
// (root first, others may sit between) in at least 90% of its samples,
// and no unnamed frame ("[unknown]", "[file+0x…]") in the samples that
// hold them. Samples outside the hot chain (process start-up in ld.so,
// exit) may hold unnamed frames: at most 3% of the workload's samples.

const symSrc = "testdata/sym/"

// symFrame returns a folded frame name as the test compares it: C++
// parameter lists removed (symbolize.ShortName), whether gprofile's
// folded output removes them or not.
func symFrame(name string) string { return symbolize.ShortName(name) }

// symUnnamed reports whether a folded frame is one gprofile could not
// name.
func symUnnamed(f string) bool {
	f = strings.TrimSuffix(f, "_[k]")
	return f == "[unknown]" || strings.HasPrefix(f, "[") && strings.Contains(f, "+0x") || strings.HasPrefix(f, "0x")
}

// symCheck is what symCheckWorkload found.
type symCheck struct {
	total, chained, unnamed, runtime int
}

// goRuntimeStack reports whether frames (root first) are a Go runtime
// thread's own stack, on g0: sysmon's (under runtime.mstart) or the
// scheduler's (runtime.mcall), which run no goroutine's code. Where a
// short sleep costs much CPU (bench/kcost's "20 µs nanosleep"), sysmon's
// sleeps take a share of a spinning Go program's samples that the chain
// check must not count against the goroutine.
func goRuntimeStack(frames []string) bool {
	return len(frames) > 0 && (strings.HasPrefix(frames[0], "runtime.mstart") || strings.HasPrefix(frames[0], "runtime.mcall"))
}

// symCheckWorkload checks the folded lines of comm: want (root first) in
// ≥ 90% of its samples (leaving out the Go runtime's own stacks,
// goRuntimeStack), no unnamed frame in those, and unnamed frames in at
// most 3% of all its samples. It returns the counts.
func symCheckWorkload(t *testing.T, folded []byte, comm string, want ...string) symCheck {
	t.Helper()
	var c symCheck
	var bad []string
	for _, l := range parseFolded(t, folded) {
		if l.frames[0] != comm {
			continue
		}
		frames := make([]string, len(l.frames)-1)
		for i, f := range l.frames[1:] {
			frames[i] = symFrame(f)
		}
		if goRuntimeStack(frames) {
			c.runtime += l.count
		} else {
			c.total += l.count
		}
		chained := hasChain(frames, want)
		if chained {
			c.chained += l.count
		}
		if slices.ContainsFunc(frames, symUnnamed) {
			c.unnamed += l.count
			if chained || len(bad) < 5 {
				bad = append(bad, fmt.Sprintf("%d× %s", l.count, strings.Join(l.frames, ";")))
			}
			if chained {
				t.Errorf("unnamed frame in a stack of the hot chain: %s", strings.Join(l.frames, ";"))
			}
		}
	}
	t.Logf("%s: %d samples (and %d of the Go runtime's own threads), %d hold %s, %d with unnamed frames", comm, c.total, c.runtime, c.chained, strings.Join(want, ";"), c.unnamed)
	if c.total < 100 {
		t.Fatalf("%d samples of %s, want at least 100\n%s", c.total, comm, folded)
	}
	if c.chained*10 < c.total*9 {
		t.Errorf("%d of %d samples of %s hold %s, want 90%%\n%s", c.chained, c.total, comm, strings.Join(want, ";"), symTopLines(folded, comm, 15))
	}
	if c.unnamed*100 > (c.total+c.runtime)*3 {
		t.Errorf("%d of %d samples of %s hold unnamed frames, want at most 3%%: %s", c.unnamed, c.total+c.runtime, comm, strings.Join(bad, "\n"))
	}
	return c
}

// symTopLines returns the n folded lines of comm with the most samples.
func symTopLines(folded []byte, comm string, n int) string {
	type line struct {
		text  string
		count int
	}
	var lines []line
	sc := bufio.NewScanner(bytes.NewReader(folded))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		text := sc.Text()
		i := strings.LastIndexByte(text, ' ')
		if i < 0 || !strings.HasPrefix(text, comm+";") {
			continue
		}
		c, _ := strconv.Atoi(text[i+1:])
		lines = append(lines, line{text, c})
	}
	slices.SortFunc(lines, func(a, b line) int { return b.count - a.count })
	var sb strings.Builder
	for i := 0; i < len(lines) && i < n; i++ {
		sb.WriteString(lines[i].text + "\n")
	}
	return sb.String()
}

// symProfileCommand runs gprofile -E -f 999 -- argv and returns the folded
// stacks; it fails t unless gprofile exits 0.
func symProfileCommand(t *testing.T, argv ...string) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cmd.folded") // stdout is the command's
	_, _, code := runGprofile(t, append([]string{"-E", "-f", "999", "-o", path, "--"}, argv...)...)
	if code != 0 {
		t.Fatalf("gprofile -- %v: exit %d", argv, code)
	}
	out, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// symProfilePID profiles process pid for secs seconds with -E and returns
// the folded stacks.
func symProfilePID(t *testing.T, pid int, secs string) []byte {
	t.Helper()
	out, _, code := runGprofile(t, "-E", "-f", "999", "-d", secs, "-p", strconv.Itoa(pid))
	if code != 0 {
		t.Fatalf("gprofile -p %d: exit %d", pid, code)
	}
	return out
}

// symBuild runs a compiler (looked up with lookTool) with args, the
// output going to t.TempDir()/name, and returns its path.
func symBuild(t *testing.T, tool, name string, args ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	args = append(args, "-o", out)
	cmd := exec.Command(tool, args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", tool, args, err, b)
	}
	return out
}

// symStartWorkload starts bin with args, in t.TempDir() (node writes
// isolate-*-v8.log files where it runs), and kills it when the test ends.
func symStartWorkload(t *testing.T, bin string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = t.TempDir()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// symComm returns the comm the kernel gives a process executing path: its
// base name, cut to 15 bytes.
func symComm(path string) string {
	base := filepath.Base(path)
	if len(base) > 15 {
		base = base[:15]
	}
	return base
}

// TestSymInlinedFrames: always_inline functions in a -O2 -g binary appear
// as frames of their own, in call order, from DWARF.
func TestSymInlinedFrames(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := testutil.BuildC(t, symSrc+"inline.c", "-O2", "-g", "-fno-omit-frame-pointer")
	out := symProfileCommand(t, bin, "1.5")
	symCheckWorkload(t, out, symComm(bin), "main", "work", "inl_mid", "inl_leaf")
}

// TestSymCXX: C++ names in a namespace, of a class template and a
// lambda, demangled.
func TestSymCXX(t *testing.T) {
	testutil.RequirePrivileges(t)
	gxx := testutil.RequireTool(t, "g++")
	bin := symBuild(t, gxx, "cxx", "-O2", "-g", "-fno-omit-frame-pointer", symSrc+"cxx.cpp")
	out := symProfileCommand(t, bin, "1.5")
	symCheckWorkload(t, out, symComm(bin), "main",
		"gprofile_test::Spinner<unsigned long>::run",
		"gprofile_test::Spinner<unsigned long>::run(unsigned long)::{lambda(unsigned long)#1}::operator()")
	if bytes.Contains(out, []byte("_ZN")) || bytes.Contains(out, []byte("_ZZ")) {
		t.Errorf("mangled names in the output:\n%s", symTopLines(out, symComm(bin), 5))
	}
}

// symFindRustc returns rustc from PATH or rustup's default place, or skips
// (see testutil.Skipf; .ci/run installs Debian's rustc): a machine with
// rustup has its toolchain in ~/.cargo/bin, which a non-login shell may
// not have on PATH.
func symFindRustc(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("rustc"); err == nil {
		return p
	}
	for _, dir := range []string{os.Getenv("HOME"), "/root"} {
		if p := filepath.Join(dir, ".cargo/bin/rustc"); dir != "" {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	testutil.Skipf(t, "rustc not found on PATH or in ~/.cargo/bin (apt install rustc: 1.59+ has -C symbol-mangling-version=v0)")
	return ""
}

// TestSymRust: Rust names with legacy and v0 mangling, demangled, without
// hashes or crate disambiguators.
func TestSymRust(t *testing.T) {
	testutil.RequirePrivileges(t)
	rustc := symFindRustc(t)
	for _, mangling := range []string{"legacy", "v0"} {
		t.Run(mangling, func(t *testing.T) {
			args := []string{"-O", "-g", "-C", "force-frame-pointers=yes", "--crate-name", "rustwork", symSrc + "rust.rs"}
			if mangling == "v0" {
				args = append(args, "-C", "symbol-mangling-version=v0")
			}
			bin := symBuild(t, rustc, "rustwork", args...)
			syms, _ := exec.Command("nm", bin).Output()
			switch {
			case mangling == "legacy" && !bytes.Contains(syms, []byte("_ZN8rustwork3hot4spin17h")):
				testutil.Skipf(t, "this rustc does not use legacy mangling by default (Rust 1.97+; Debian 12's 1.63 does)")
			case mangling == "v0" && !bytes.Contains(syms, []byte("_RNvNtCs")):
				t.Fatalf("no v0-mangled symbols in %s", bin)
			}
			out := symProfileCommand(t, bin, "1.5")
			symCheckWorkload(t, out, symComm(bin), "rustwork::hot::outer", "rustwork::hot::mid", "rustwork::hot::spin")
			if bad := regexp.MustCompile(`::h[0-9a-f]{16}\b|_ZN|_RNv`).Find(out); bad != nil {
				t.Errorf("output holds %q (a hash or a mangled name):\n%s", bad, symTopLines(out, symComm(bin), 5))
			}
		})
	}
}

// TestSymGo: Go binaries with and without .symtab are named from
// .gopclntab.
func TestSymGo(t *testing.T) {
	testutil.RequirePrivileges(t)
	for _, strip := range []bool{false, true} {
		t.Run(map[bool]string{false: "symtab", true: "stripped"}[strip], func(t *testing.T) {
			var flags []string
			if strip {
				flags = append(flags, "-ldflags=-s -w")
			}
			bin := testutil.BuildGo(t, symSrc+"gowork.go", flags...)
			out := symProfileCommand(t, bin, "1.5")
			symCheckWorkload(t, out, symComm(bin), "main.main", "main.goOuter", "main.goMid", "main.goSpin")
		})
	}
}

// TestSymDlopen: a library loaded with dlopen after the process was first
// seen gets its function names.
func TestSymDlopen(t *testing.T) {
	testutil.RequirePrivileges(t)
	lib := testutil.BuildC(t, symSrc+"libhot.c", "-O2", "-g", "-fno-omit-frame-pointer", "-shared", "-fPIC")
	lib2 := filepath.Join(filepath.Dir(lib), "libhot.so")
	if err := os.Rename(lib, lib2); err != nil {
		t.Fatal(err)
	}
	bin := testutil.BuildC(t, symSrc+"dlopen_main.c", "-O2", "-g", "-fno-omit-frame-pointer", "-ldl")
	out := symProfileCommand(t, bin, lib2, "2")
	// The first 10% of the run spins in main before dlopen: check the
	// samples in the library.
	symCheckSubset(t, out, symComm(bin), "hot_entry", []string{"main", "hot_entry", "hot_inner"})
}

// symCheckSubset is symCheckWorkload on the samples of comm that hold
// the frame anchor.
func symCheckSubset(t *testing.T, folded []byte, comm, anchor string, want []string) {
	t.Helper()
	var sub bytes.Buffer
	for _, l := range parseFolded(t, folded) {
		if l.frames[0] == comm && slices.Contains(l.frames, anchor) {
			fmt.Fprintf(&sub, "%s %d\n", strings.Join(l.frames, ";"), l.count)
		}
	}
	symCheckWorkload(t, sub.Bytes(), comm, want...)
}

// TestSymShortLived: processes that live 300 ms, one after another, are
// named as well as a long-lived one, though each exits during the run.
// In "warm", a first process of another name (warm, 2 s) has the shared
// libraries' debug information read (0.3-0.8 s on a busy 2-CPU machine);
// in "cold", the short-lived ones are the first to need it (gprofile reads
// samples on one goroutine, which registers each new process at once with
// Symbolizer.Observe, and symbolizes on another).
func TestSymShortLived(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := testutil.BuildC(t, symSrc+"short.c", "-O2", "-g", "-fno-omit-frame-pointer")
	warm := filepath.Join(t.TempDir(), "warm")
	if b, err := os.ReadFile(bin); err != nil || os.WriteFile(warm, b, 0o755) != nil {
		t.Fatalf("copy %s: %v", bin, err)
	}
	// sh's times builtin writes the CPU time of its children, before and
	// after the short ones: the samples they should get at 999 Hz.
	loop := fmt.Sprintf("times >&2; for i in 1 2 3 4 5 6; do %s 0.3; done; times >&2", bin)
	for _, tt := range []struct{ name, script string }{
		{"warm", warm + " 2; " + loop},
		{"cold", loop},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cmd.folded") // stdout is the command's
			_, stderr, code := runGprofile(t, "-E", "-f", "999", "-o", path, "--", "sh", "-c", tt.script)
			if code != 0 {
				t.Fatalf("gprofile -- sh -c %q: exit %d", tt.script, code)
			}
			out, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			c := symCheckWorkload(t, out, symComm(bin), "main", "short_a", "short_b", "short_c")
			expected := symChildrenCPU(t, stderr).Seconds() * 999
			if float64(c.total) < 0.8*expected || expected < 300 {
				t.Errorf("%d samples of 6 processes of 0.3 s at 999 Hz, want 80%% of the %.0f their CPU time gives (at least 300)", c.total, expected)
			}
		})
	}
}

// symChildrenCPU returns the CPU time of sh's children between the last
// two runs of its times builtin in stderr (each writes the shell's user
// and system time, then its children's: "0m1.230000s 0m0.010000s").
func symChildrenCPU(t *testing.T, stderr []byte) time.Duration {
	t.Helper()
	rx := regexp.MustCompile(`(?m)^(\d+)m([\d.]+)s (\d+)m([\d.]+)s$`)
	m := rx.FindAllStringSubmatch(string(stderr), -1)
	if len(m) < 4 {
		t.Fatalf("no two outputs of sh's times in stderr:\n%s", stderr)
	}
	sum := func(m []string) time.Duration {
		var d time.Duration
		for _, i := range []int{1, 3} {
			mins, _ := strconv.Atoi(m[i])
			sec, _ := strconv.ParseFloat(m[i+1], 64)
			d += time.Duration(mins)*time.Minute + time.Duration(sec*float64(time.Second))
		}
		return d
	}
	return sum(m[len(m)-1]) - sum(m[len(m)-3])
}

// TestSymDeletedBinary: a binary deleted after its process started is
// read through /proc/PID/map_files, for its names and, built without
// frame pointers, for the CFI its whole stacks need (a package upgraded
// under a running process: before, it had no CFI and every stack was cut
// at its first frame).
func TestSymDeletedBinary(t *testing.T) {
	testutil.RequirePrivileges(t)
	for _, fp := range []string{"-fno-omit-frame-pointer", "-fomit-frame-pointer"} {
		t.Run(fp, func(t *testing.T) {
			bin := testutil.BuildC(t, "testdata/chain.c", "-O2", "-g", fp)
			cmd := symStartWorkload(t, bin, "20")
			symWaitMapped(t, cmd.Process.Pid, bin)
			if err := os.Remove(bin); err != nil {
				t.Fatal(err)
			}
			out := symProfilePID(t, cmd.Process.Pid, "1.5")
			symCheckWorkload(t, out, "chain", "main", "chain_a", "chain_b", "chain_c")
		})
	}
}

// TestSymMemfdProgram: a program exec'd from a memfd file (maps path
// "/memfd:NAME (deleted)", as a container runtime's sealed copy of itself
// or an agent runs) is an ELF binary, not JIT code: named from its own
// symbols and DWARF, its CFI read through /proc/PID/map_files (built
// without frame pointers, so that its stacks need it).
func TestSymMemfdProgram(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := testutil.BuildC(t, "testdata/chain.c", "-O2", "-g", "-fomit-frame-pointer")
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.MemfdCreate("gprofile-chain", unix.MFD_CLOEXEC)
	if err != nil {
		t.Skipf("memfd_create: %v", err)
	}
	f := os.NewFile(uintptr(fd), "memfd")
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	// exec'd through this process's descriptor: the child's comm is the
	// path's base name, the descriptor's number.
	path := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), fd)
	cmd := symStartWorkload(t, path, "20")
	symWaitMapped(t, cmd.Process.Pid, "/memfd:gprofile-chain")
	out := symProfilePID(t, cmd.Process.Pid, "1.5")
	symCheckWorkload(t, out, symComm(path), "main", "chain_a", "chain_b", "chain_c")
}

// symWaitMapped waits until process pid has path mapped (it has exec'd).
func symWaitMapped(t *testing.T, pid int, path string) {
	t.Helper()
	symWaitFor(t, 10*time.Second, fmt.Sprintf("process %d to map %s", pid, path), func() bool {
		maps, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
		return bytes.Contains(maps, []byte(path))
	})
}

// symWaitFor polls cond every 10 ms and fails the test, saying what it
// waited for, when cond is still false after limit.
func symWaitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", limit, what)
		}
	}
}

// TestSymMountNamespace: a binary on a tmpfs mounted in the process's own
// mount namespace, at a path that does not exist on the host, is read
// through /proc/PID/root.
func TestSymMountNamespace(t *testing.T) {
	testutil.RequirePrivileges(t)
	unshare := testutil.RequireTool(t, "unshare")
	bin := testutil.BuildC(t, "testdata/chain.c", "-O2", "-g", "-fno-omit-frame-pointer")
	dir := t.TempDir()
	inner := filepath.Join(dir, "chain")
	script := fmt.Sprintf("mount -t tmpfs gprofile-test %s && cp %s %s && exec %s 20", dir, bin, inner, inner)
	cmd := symStartWorkload(t, unshare, "-m", "--propagation", "private", "sh", "-c", script)
	symWaitMapped(t, cmd.Process.Pid, inner)
	if _, err := os.Stat(inner); err == nil {
		t.Fatalf("%s exists on the host: the mount leaked out of the namespace", inner)
	}
	out := symProfilePID(t, cmd.Process.Pid, "1.5")
	symCheckWorkload(t, out, "chain", "main", "chain_a", "chain_b", "chain_c")
}

// TestSymNodePerfMap: JavaScript functions that V8 compiled are named
// from node's perf map (--perf-basic-prof writes /tmp/perf-PID.map).
func TestSymNodePerfMap(t *testing.T) {
	testutil.RequirePrivileges(t)
	node := testutil.RequireTool(t, "node", "apt install nodejs")
	script, err := filepath.Abs(symSrc + "hot.js")
	if err != nil {
		t.Fatal(err)
	}
	cmd := symStartWorkload(t, node, "--perf-basic-prof", script, "20")
	perfMap := fmt.Sprintf("/tmp/perf-%d.map", cmd.Process.Pid)
	t.Cleanup(func() { os.Remove(perfMap) })
	// Wait until V8 has optimized the hot function ("*" marks optimized
	// code in the perf map's names).
	symWaitFor(t, 30*time.Second, "V8 to optimize gprofileHotLoop (a *gprofileHotLoop line in "+perfMap+")", func() bool {
		b, _ := os.ReadFile(perfMap)
		return bytes.Contains(b, []byte("*gprofileHotLoop"))
	})
	cpu := testutil.StartCPU(t, strconv.Itoa(cmd.Process.Pid))
	out := symProfilePID(t, cmd.Process.Pid, "2")
	expected := cpu.ExpectedSamples(999, 2*time.Second)
	total, named := 0, 0
	for _, l := range parseFolded(t, out) {
		if l.frames[0] != "node" {
			continue
		}
		total += l.count
		if slices.ContainsFunc(l.frames, func(f string) bool { return strings.Contains(f, "gprofileHotLoop") }) {
			named += l.count
		}
	}
	t.Logf("node: %d samples, %d name gprofileHotLoop", total, named)
	if float64(total) < 0.8*expected || expected < 500 || named*10 < total*8 {
		t.Errorf("%d of %d samples of node name gprofileHotLoop, want 80%% of 80%% of the %.0f its CPU share gives (at least 500)\n%s",
			named, total, expected, symTopLines(out, "node", 10))
	}
}
