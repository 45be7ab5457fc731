package output

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/gprofile/gprofile/internal/testutil"
)

var fixtureMeta = Meta{
	Start:    time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	Duration: 10 * time.Second,
	Period:   fixturePeriod,
	Comments: []string{"gprofile -F 99 -d 10s"},
}

// parsedFixture writes the fixture as a pprof file and parses it back.
func parsedFixture(t *testing.T) (*profile.Profile, []byte) {
	t.Helper()
	var buf bytes.Buffer
	if err := WritePprof(&buf, newFixture().aggregate(), fixtureMeta); err != nil {
		t.Fatal(err)
	}
	data := slices.Clone(buf.Bytes())
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	return p, data
}

func TestPprofHeader(t *testing.T) {
	p, _ := parsedFixture(t)
	var types []string
	for _, st := range p.SampleType {
		types = append(types, st.Type+"/"+st.Unit)
	}
	if want := []string{"samples/count", "cpu/nanoseconds"}; !slices.Equal(types, want) {
		t.Errorf("sample types %v, want %v", types, want)
	}
	if p.DefaultSampleType != "cpu" {
		t.Errorf("default sample type %q", p.DefaultSampleType)
	}
	if p.PeriodType == nil || p.PeriodType.Type != "cpu" || p.PeriodType.Unit != "nanoseconds" || p.Period != fixturePeriod {
		t.Errorf("period %v %d", p.PeriodType, p.Period)
	}
	if p.TimeNanos != fixtureMeta.Start.UnixNano() || p.DurationNanos != int64(10*time.Second) {
		t.Errorf("time %d duration %d", p.TimeNanos, p.DurationNanos)
	}
	if !slices.Equal(p.Comments, fixtureMeta.Comments) {
		t.Errorf("comments %q", p.Comments)
	}
	if p.Mapping[0].File != "/usr/bin/app" {
		t.Errorf("first mapping %q, want the first executable /usr/bin/app", p.Mapping[0].File)
	}
}

// sampleOf returns the sample of pid and comm whose leaf location holds fn,
// or has no lines if fn is "".
func sampleOf(t *testing.T, p *profile.Profile, pid int64, comm, fn string) *profile.Sample {
	t.Helper()
	for _, s := range p.Sample {
		if s.NumLabel[LabelPID][0] != pid || (comm != "" && s.Label[LabelComm][0] != comm) {
			continue
		}
		l := s.Location[0]
		if (fn == "" && len(l.Line) == 0) || (len(l.Line) > 0 && l.Line[0].Function.Name == fn) {
			return s
		}
	}
	t.Fatalf("no sample of pid %d comm %q with leaf %s", pid, comm, fn)
	return nil
}

func TestPprofSamples(t *testing.T) {
	p, _ := parsedFixture(t)
	if len(p.Sample) != 9 {
		t.Errorf("%d samples, want 9 (one per pid, comm and stack)", len(p.Sample))
	}
	var total [2]int64
	for _, s := range p.Sample {
		total[0] += s.Value[0]
		total[1] += s.Value[1]
		if len(s.NumLabel[LabelPID]) != 1 || len(s.NumUnit[LabelPID]) != 0 {
			t.Errorf("sample pid label %v unit %v", s.NumLabel, s.NumUnit)
		}
		if pid := s.NumLabel[LabelPID][0]; (pid == 300) != (s.Label[LabelComm] == nil) {
			t.Errorf("pid %d: comm label %v, want none only for the empty comm", pid, s.Label)
		}
	}
	if total != [2]int64{20, 20 * fixturePeriod} {
		t.Errorf("totals %v", total)
	}
	s := sampleOf(t, p, 100, "worker;1", "vfs_write")
	if s.Value[0] != 1 || s.Value[1] != fixturePeriod {
		t.Errorf("worker;1 values %v", s.Value)
	}
	var names []string
	for _, l := range s.Location {
		names = append(names, l.Line[0].Function.Name)
	}
	want := []string{"vfs_write", "ksys_write", "do_syscall_64", "entry_SYSCALL_64_after_hwframe",
		"write", "main", "__libc_start_call_main"}
	if !slices.Equal(names, want) {
		t.Errorf("locations %v, want leaf first %v", names, want)
	}
}

func TestPprofMappings(t *testing.T) {
	p, _ := parsedFixture(t)
	byFile := map[string][]*profile.Mapping{}
	for _, m := range p.Mapping {
		byFile[m.File] = append(byFile[m.File], m)
	}
	for file, n := range map[string]int{
		KernelFile: 1, "/usr/bin/app": 1, "/usr/lib/x86_64-linux-gnu/libc.so.6": 1,
		"/opt/lib/libplain.so": 1, "/usr/bin/server": 1, "/opt/lib/libstripped.so": 1,
		"[vdso]": 1, "": 2, // JIT code of two processes stays apart
	} {
		if len(byFile[file]) != n {
			t.Errorf("%d mappings of %q, want %d", len(byFile[file]), file, n)
		}
	}
	if len(p.Mapping) != 9 {
		t.Errorf("%d mappings, want 9", len(p.Mapping))
	}
	flags := func(m *profile.Mapping) [4]bool {
		return [4]bool{m.HasFunctions, m.HasFilenames, m.HasLineNumbers, m.HasInlineFrames}
	}
	for file, want := range map[string][4]bool{
		"/usr/bin/app":                        {true, true, true, true},
		"/usr/bin/server":                     {true, true, true, false},
		"/usr/lib/x86_64-linux-gnu/libc.so.6": {true, false, false, false},
		"/opt/lib/libstripped.so":             {false, false, false, false},
		KernelFile:                            {false, false, false, false}, // one hidden frame
	} {
		if got := flags(byFile[file][0]); got != want {
			t.Errorf("%s: Has{Functions,Filenames,LineNumbers,InlineFrames} = %v, want %v", file, got, want)
		}
	}
	libc := byFile["/usr/lib/x86_64-linux-gnu/libc.so.6"][0]
	if libc.Start != 0x7f0000028000 || libc.Limit != 0x7f000017d000 || libc.Offset != 0x28000 || libc.BuildID != "c0c0c0" {
		t.Errorf("libc mapping %+v, want the first process's range", libc)
	}
}

// TestPprofRebase checks that the same code in three processes with
// different bases is one location, inside the one mapping's range.
func TestPprofRebase(t *testing.T) {
	p, _ := parsedFixture(t)
	leaf := func(s *profile.Sample, fn string) *profile.Location {
		for _, l := range s.Location {
			if len(l.Line) > 0 && l.Line[0].Function.Name == fn {
				return l
			}
		}
		t.Fatalf("no %s in sample %v", fn, s)
		return nil
	}
	write100 := leaf(sampleOf(t, p, 100, "app", "vfs_write"), "write")
	write101 := leaf(sampleOf(t, p, 101, "app", "vfs_write"), "write")
	write200 := leaf(sampleOf(t, p, 200, "server", ""), "write")
	if write100 != write101 || write100 != write200 {
		t.Errorf("write is locations %d, %d, %d; want one", write100.ID, write101.ID, write200.ID)
	}
	for _, c := range []struct {
		l   *profile.Location
		off uint64
	}{
		{write100, offWrite}, // the user leaf: its address as sampled
		// Callers: return address - 1, inside the call instruction, as
		// pprof wants (see callSite).
		{leaf(sampleOf(t, p, 200, "server", "jit_mul"), "plain_helper"), offPlain - 1},
		{leaf(sampleOf(t, p, 101, "app", "jit_add"), "main"), offMain - 1},
	} {
		m := c.l.Mapping
		if c.l.Address < m.Start || c.l.Address >= m.Limit || c.l.Address-m.Start+m.Offset != c.off {
			t.Errorf("location %#x in %s [%#x, %#x) at offset %#x: file offset %#x, want %#x",
				c.l.Address, m.File, m.Start, m.Limit, m.Offset, c.l.Address-m.Start+m.Offset, c.off)
		}
	}
	if a, b := leaf(sampleOf(t, p, 101, "app", "jit_add"), "jit_add"), leaf(sampleOf(t, p, 200, "server", "jit_mul"), "jit_mul"); a == b || a.Mapping == b.Mapping {
		t.Error("JIT code of two processes at one address shares a location or mapping")
	}
}

func TestPprofLocations(t *testing.T) {
	p, _ := parsedFixture(t)
	s := sampleOf(t, p, 100, "app", "square")
	var lines []string
	for _, ln := range s.Location[0].Line {
		lines = append(lines, fmt.Sprintf("%s:%s:%d", ln.Function.Name, ln.Function.Filename, ln.Line))
	}
	if want := []string{"square:app.c:3", "scale:app.c:10", "compute:app.c:20"}; !slices.Equal(lines, want) {
		t.Errorf("inlined location lines %v, want innermost first %v", lines, want)
	}
	// Direct recursion: two locations, the same one twice.
	if len(s.Location) != 7 || s.Location[1] != s.Location[2] || s.Location[1].Line[0].Function.Name != "fact" {
		t.Errorf("compute stack has %d locations, want 7 with fact twice", len(s.Location))
	}

	u := p.Sample[len(p.Sample)-1] // pid 300 sorts last
	if len(u.Location) != 3 {
		t.Fatalf("unnamed stack has %d locations, want 3", len(u.Location))
	}
	for i, want := range []string{"[vdso]", "/opt/lib/libstripped.so", ""} {
		l := u.Location[i]
		if len(l.Line) != 0 {
			t.Errorf("unnamed location %d has lines %v", i, l.Line)
		}
		if got := ""; l.Mapping != nil {
			got = l.Mapping.File
			if got != want {
				t.Errorf("unnamed location %d in %q, want %q", i, got, want)
			}
		} else if want != "" || l.Address != noMapAddr-1 { // a caller: return address - 1
			t.Errorf("location %d: no mapping at %#x, want %q", i, l.Address, want)
		}
	}
	if l := u.Location[1]; l.Address-l.Mapping.Start+l.Mapping.Offset != offStripped-1 {
		t.Errorf("stripped frame at %#x", l.Address)
	}

	k := sampleOf(t, p, 200, "server", "")
	if l := k.Location[0]; l.Mapping.File != KernelFile || l.Address != hiddenKernel || len(l.Line) != 0 {
		t.Errorf("hidden kernel frame: %#x in %s, lines %v", l.Address, l.Mapping.File, l.Line)
	}
}

func TestBuildPprofEdgeCases(t *testing.T) {
	p, err := BuildPprof(NewAggregator(), Meta{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Sample) != 0 || p.TimeNanos != 0 {
		t.Errorf("empty profile has %d samples, time %d", len(p.Sample), p.TimeNanos)
	}
	p, err = BuildPprof(aggregateOf(Sample{PID: 1, Comm: "idle", Count: 1, Nanos: 5}), Meta{})
	if err != nil || len(p.Sample) != 1 || len(p.Sample[0].Location) != 0 {
		t.Errorf("nil stack: %v, %v", p, err)
	}
	if _, err := BuildPprof(NewAggregator(), Meta{Period: -1}); err == nil {
		t.Error("negative period accepted")
	}
}

// TestGoToolPprof runs go tool pprof -top on the fixture's profile. With
// symbolization off it must print nothing on stderr; with the default
// symbolization it may only try the one binary whose frames are unnamed.
func TestGoToolPprof(t *testing.T) {
	goBin := goTool(t)
	_, data := parsedFixture(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "fixture.pb.gz")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, string) {
		cmd := exec.Command(goBin, append([]string{"tool", "pprof"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "PPROF_BINARY_PATH="+dir, "PPROF_TMPDIR="+dir)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("go tool pprof %v: %v\n%s", args, err, stderr.String())
		}
		return stdout.String(), stderr.String()
	}

	out, errOut := run("-top", "-nodefraction=0", "-symbolize=none", file)
	if errOut != "" {
		t.Errorf("go tool pprof -top -symbolize=none warned:\n%s", errOut)
	}
	for _, fn := range []string{"square (inline)", "scale (inline)", "compute", "fact", "main", "write",
		"__libc_start_call_main", "plain_helper", "jit_add", "jit_mul", "serve", "vfs_write",
		"entry_SYSCALL_64_after_hwframe", "clear_page_erms", "ret_from_fork", "[libstripped.so]"} {
		if !strings.Contains(out, fn) {
			t.Errorf("go tool pprof -top output lacks %q:\n%s", fn, out)
		}
	}
	if !strings.Contains(out, "Type: cpu") || !strings.Contains(out, "Duration: 10s") {
		t.Errorf("go tool pprof -top header:\n%s", out)
	}

	_, errOut = run("-top", file)
	for _, named := range []string{"app", "libc", "libplain", "server", "kallsyms", "vdso"} {
		if strings.Contains(errOut, named) {
			t.Errorf("go tool pprof tried to re-symbolize %s, which is named:\n%s", named, errOut)
		}
	}
}

// goTool returns the go command of the toolchain on PATH (see
// testutil.RequireTool).
func goTool(t *testing.T) string {
	t.Helper()
	goCmd := testutil.RequireTool(t, "go", "go tool pprof reads the profile")
	out, err := exec.Command(goCmd, "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	goBin := filepath.Join(strings.TrimSpace(string(out)), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		t.Fatalf("no go command in GOROOT: %v", err)
	}
	return goBin
}
