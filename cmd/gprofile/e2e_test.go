package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/gprofile/gprofile/internal/testutil"
)

var (
	buildOnce sync.Once
	gprofile  string
	buildErr  error
)

// buildGprofile builds the command once per test run into a temp dir;
// GPROFILE_TEST_BIN, when set, names a binary to test instead (an older
// build, to see a test fail without a fix).
func buildGprofile(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if gprofile = os.Getenv("GPROFILE_TEST_BIN"); gprofile != "" {
			return
		}
		dir, err := os.MkdirTemp("", "gprofile-test-")
		if err != nil {
			buildErr = err
			return
		}
		gprofile = filepath.Join(dir, "gprofile")
		out, err := exec.Command("go", "build", "-o", gprofile, ".").CombinedOutput()
		if err != nil {
			buildErr = &buildError{err, out}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return gprofile
}

type buildError struct {
	err error
	out []byte
}

func (e *buildError) Error() string { return "go build: " + e.err.Error() + "\n" + string(e.out) }

// startChain builds and starts testdata/chain.c for secs seconds.
func startChain(t *testing.T, secs int) (*exec.Cmd, string) {
	t.Helper()
	bin := testutil.BuildC(t, "testdata/chain.c", "-O2", "-g", "-fno-omit-frame-pointer")
	cmd := exec.Command(bin, strconv.Itoa(secs))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, bin
}

// foldedLine is one parsed line of folded output.
type foldedLine struct {
	frames []string
	count  int
}

func parseFolded(t *testing.T, b []byte) []foldedLine {
	t.Helper()
	var lines []foldedLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		i := strings.LastIndexByte(sc.Text(), ' ')
		n, err := strconv.Atoi(sc.Text()[i+1:])
		if i < 0 || err != nil {
			t.Fatalf("bad folded line %q", sc.Text())
		}
		lines = append(lines, foldedLine{strings.Split(sc.Text()[:i], ";"), n})
	}
	return lines
}

// hasChain reports whether frames hold want in order (others may sit
// between).
func hasChain(frames, want []string) bool {
	i := 0
	for _, f := range frames {
		if i < len(want) && f == want[i] {
			i++
		}
	}
	return i == len(want)
}

// vdsoHelper reports whether frames[i] is an address in the vDSO called
// from an exported __vdso_ function: one of the vDSO's static helpers (the
// clock read after rdtsc, say), which no symbol names, since the image the
// kernel maps holds only .dynsym (perf shows [unknown] there).
func vdsoHelper(frames []string, i int) bool {
	return i > 0 && strings.HasPrefix(frames[i], "[vdso+0x") && strings.HasPrefix(frames[i-1], "__vdso_")
}

// TestFoldedChain profiles the chain workload by pid and requires the
// whole chain, root first, in at least 90% of its samples.
func TestFoldedChain(t *testing.T) {
	testutil.RequirePrivileges(t)
	gp := buildGprofile(t)
	cmd, _ := startChain(t, 20)
	var stderr bytes.Buffer
	prof := exec.Command(gp, "-p", strconv.Itoa(cmd.Process.Pid), "-d", "2", "-f", "999", "-E")
	prof.Stderr = &stderr
	cpu := testutil.StartCPU(t, strconv.Itoa(cmd.Process.Pid))
	out, err := prof.Output()
	expected := cpu.ExpectedSamples(999, 2*time.Second)
	if err != nil {
		t.Fatalf("gprofile: %v\n%s", err, stderr.Bytes())
	}
	t.Logf("stderr: %s", stderr.Bytes())
	want := []string{"main", "chain_a", "chain_b", "chain_c"}
	total, chained := 0, 0
	for _, l := range parseFolded(t, out) {
		if l.frames[0] != "chain" {
			t.Errorf("folded line of another comm: %v", l.frames)
		}
		total += l.count
		if hasChain(l.frames[1:], want) {
			chained += l.count
		}
		for i, f := range l.frames {
			if symUnnamed(f) && !vdsoHelper(l.frames, i) {
				t.Errorf("unnamed frame %q in %v", f, l.frames)
			}
		}
	}
	if float64(total) < 0.8*expected || expected < 200 {
		t.Errorf("%d samples in 2 s at 999 Hz, want at least 80%% of the %.0f its CPU share gives", total, expected)
	}
	if chained*10 < total*9 {
		t.Errorf("%d of %d samples hold main;chain_a;chain_b;chain_c, want 90%%\n%s", chained, total, out)
	}
	if !regexp.MustCompile(`gprofile: \d+ samples \(0 lost\)`).Match(stderr.Bytes()) {
		t.Errorf("no end-of-run line with 0 lost in stderr: %s", stderr.Bytes())
	}
}

// TestWholeSystemPprof profiles every CPU into a pprof file and checks it
// parses, is valid, names kernel and workload frames, and that go tool
// pprof -top reads it. dd copying /dev/zero to /dev/null keeps a process
// in the kernel: on a quiet machine the chain workload alone (all user
// mode) may leave no kernel frame in 400 samples.
func TestWholeSystemPprof(t *testing.T) {
	testutil.RequirePrivileges(t)
	gp := buildGprofile(t)
	startChain(t, 20)
	dd := exec.Command("dd", "if=/dev/zero", "of=/dev/null", "bs=512")
	if err := dd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dd.Process.Kill(); dd.Wait() })
	path := filepath.Join(t.TempDir(), "whole.pb.gz")
	prof := exec.Command(gp, "-d", "2", "-f", "199", "-o", path)
	var out bytes.Buffer
	prof.Stdout, prof.Stderr = &out, &out
	if err := prof.Start(); err != nil {
		t.Fatal(err)
	}
	if err := prof.Wait(); err != nil {
		t.Fatalf("gprofile: %v\n%s", err, out.Bytes())
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	for _, smp := range p.Sample {
		if pid := smp.NumLabel["pid"]; len(pid) == 1 && pid[0] == int64(prof.Process.Pid) {
			t.Fatalf("gprofile sampled itself (use --self for that): %v", smp.Label)
		}
	}
	names := map[string]bool{}
	kernelNamed, kernelLocs := false, 0
	for _, loc := range p.Location {
		if loc.Mapping != nil && loc.Mapping.File == "[kernel.kallsyms]" {
			kernelLocs++
		}
		for _, ln := range loc.Line {
			names[ln.Function.Name] = true
			if loc.Mapping != nil && loc.Mapping.File == "[kernel.kallsyms]" {
				kernelNamed = true
			}
		}
	}
	for _, fn := range []string{"main", "chain_a", "chain_b", "chain_c"} {
		if !names[fn] {
			t.Errorf("function %s not in the profile", fn)
		}
	}
	// Function.StartLine: the line of chain_c's first instruction, its
	// declaration in testdata/chain.c (or the next two lines).
	decl := sourceLine(t, "testdata/chain.c", "void chain_c(")
	for _, fn := range p.Function {
		if fn.Name == "chain_c" && (fn.StartLine < decl || fn.StartLine > decl+2) {
			t.Errorf("chain_c starts at line %d, want %d-%d (testdata/chain.c)", fn.StartLine, decl, decl+2)
		}
	}
	if !kernelNamed {
		t.Errorf("no named kernel frame in a whole-system profile (%d kernel locations); gprofile said:\n%s", kernelLocs, out.Bytes())
	}
	top, err := exec.Command("go", "tool", "pprof", "-top", path).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -top: %v\n%s", err, top)
	}
	if !bytes.Contains(top, []byte("chain_c")) {
		t.Errorf("go tool pprof -top does not show chain_c:\n%s", top)
	}
}

// TestBadInput checks that bad input fails before sampling with a one-line
// error, and leaves no output file behind.
func TestBadInput(t *testing.T) {
	gp := buildGprofile(t)
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no such pid", []string{"-p", "999999999", "-d", "1"}, 2, "no such process"},
		{"zero frequency", []string{"-f", "0", "-d", "1"}, 2, "frequency"},
		{"frequency too high", []string{"-f", "100000000", "-d", "1"}, 2, "perf_event_max_sample_rate"},
		{"bad pid", []string{"-p", "abc"}, 2, "bad pid"},
		{"bad duration", []string{"-d", "soon"}, 2, "duration"},
		{"stray argument", []string{"extra"}, 2, "unexpected argument"},
		{"unwritable output", []string{"-d", "1", "-o", filepath.Join(dir, "missing", "x.pb.gz")}, 1, "cannot write"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Non-root fails earlier, on privileges, where the machine is
			// asked (the pid, the frequency limit) or a file is opened.
			if c.code == 1 || c.name == "no such pid" || strings.Contains(c.name, "frequency") {
				testutil.RequirePrivileges(t)
			}
			cmd := exec.Command(gp, c.args...)
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != c.code {
				t.Fatalf("exit %v, want code %d\n%s", err, c.code, out)
			}
			if !strings.Contains(string(out), c.msg) || strings.Contains(string(out), "goroutine ") {
				t.Errorf("output %q does not say %q (or holds a Go stack trace)", out, c.msg)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("files left behind: %v", entries)
			}
		})
	}
}

// TestSymUnnamed: the folded forms of a frame gprofile could not name,
// which the end-to-end tests reject, and named ones they accept.
func TestSymUnnamed(t *testing.T) {
	for f, want := range map[string]bool{
		"[unknown]": true, "[libc.so.6+0x29d90]": true, "[vdso+0x9d0]": true, "0x7f0012345678": true,
		"[unknown]_[k]": true, "main": false, "chain_c": false, "vfs_write_[k]": false, "[libc.so.6]": false,
	} {
		if symUnnamed(f) != want {
			t.Errorf("symUnnamed(%q) = %v, want %v", f, !want, want)
		}
	}
}

// sourceLine returns the 1-based number of the first line of file that
// contains text.
func sourceLine(t *testing.T, file, text string) int64 {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(src), "\n") {
		if strings.Contains(l, text) {
			return int64(i + 1)
		}
	}
	t.Fatalf("%s has no line with %q", file, text)
	return 0
}
