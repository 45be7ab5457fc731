package symbolize

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gprofile/gprofile/internal/symbolize/procmaps"
	"golang.org/x/sys/unix"
)

// writePerfMap writes (append false) or appends lines to the perf map
// at /tmp/perf-<name>.map inside root.
func writePerfMap(t *testing.T, root string, name uint32, appendTo bool, lines ...string) {
	t.Helper()
	dir := filepath.Join(root, "tmp")
	os.MkdirAll(dir, 0o755)
	flag := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if appendTo {
		flag = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("perf-%d.map", name)), flag, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		f.WriteString(l + "\n")
	}
	f.Close()
}

func TestStackPerfMap(t *testing.T) {
	const pid = 90
	jit := procmaps.Entry{Start: 0x7f0000000000, Limit: 0x7f0000100000, Perms: "rwxp"}
	named := procmaps.Entry{Start: 0x7f0000200000, Limit: 0x7f0000300000, Perms: "r-xp", Path: "[anon:v8 code]"}
	// JIT code double-mapped from a memfd file, which is no ELF program.
	memfd := procmaps.Entry{Start: 0x7f0000400000, Limit: 0x7f0000500000, Perms: "r-xp", Path: "/memfd:doublemapper", Inode: 77, Deleted: true}
	fp := newFakeProc(t)
	fp.setMaps(pid, jit, named, memfd)
	code := filepath.Join(t.TempDir(), "jit-code")
	if err := os.WriteFile(code, []byte(strings.Repeat("\xcc", 4096)), 0o644); err != nil {
		t.Fatal(err)
	}
	fp.linkMapFile(pid, memfd, code)
	root := fp.fakeRoot(pid)
	writePerfMap(t, root, pid, false,
		"7f0000001000 100 LazyCompile:*hot /tmp/hot.js:3",
		"7f0000200000 40 _ZN2ns7mangledEi",
		"7f0000800000 10 outside every mapping",
		"7f0000400100 20 jitted_in_memfd",
		"garbage line",
		strings.Repeat("y", 10<<20))
	s := fp.symbolizer("testdata/kallsyms.txt")
	now := time.Unix(1000, 0)
	s.procs.now = func() time.Time { return now }
	s.procs.settle = nil // no unasked reads on real timers
	ips := []uint64{0x7f0000001010, 0x7f0000200011, 0x7f0000800001, 0x7f0000400111, 0x7f0000002001}
	st := s.Stack(pid, nil, ips)
	checkFrames(t, st.Frames, []wantFrame{
		{"LazyCompile:*hot /tmp/hot.js:3", ReasonNone, ""},
		{"ns::mangled(int)", ReasonNone, "[anon:v8 code]"},
		{"outside every mapping", ReasonNone, fmt.Sprintf("[perf-%d.map]", pid)},
		{"jitted_in_memfd", ReasonNone, "/memfd:doublemapper"},
		{"", ReasonNoSymbol, ""},
	})
	if f := st.Frames[0]; f.SymbolStart != 0x7f0000001000 || f.SystemName != f.Function {
		t.Errorf("frame 0 = %+v", f)
	}
	if n := s.Stats().PerfMapLinesSkipped; n != 2 {
		t.Errorf("PerfMapLinesSkipped = %d, want 2", n)
	}

	// The JIT appends: the new code is named once the map is read again,
	// at most every perfMapCheckInterval.
	writePerfMap(t, root, pid, true, "7f0000002000 80 LazyCompile:*later /tmp/hot.js:9")
	now = now.Add(perfMapCheckInterval / 2)
	checkFrames(t, s.Stack(pid, nil, ips[4:]).Frames, []wantFrame{{"", ReasonNoSymbol, ""}})
	now = now.Add(perfMapCheckInterval)
	checkFrames(t, s.Stack(pid, nil, ips[4:]).Frames, []wantFrame{{"LazyCompile:*later /tmp/hot.js:9", ReasonNone, ""}})
}

// nsJITProcess fakes process pid, in a PID namespace where it is nspid,
// with one anonymous executable mapping at 0x7f0000000000 (JIT code). It
// returns the fake /proc, the process's root and its status file.
func nsJITProcess(t *testing.T, pid, nspid uint32) (fp *fakeProc, root, status string) {
	t.Helper()
	fp = newFakeProc(t)
	fp.setMaps(pid, procmaps.Entry{Start: 0x7f0000000000, Limit: 0x7f0000100000, Perms: "r-xp"})
	root = fp.fakeRoot(pid)
	status = filepath.Join(fp.root, fmt.Sprint(pid), "status")
	text := fmt.Sprintf("Name:\tnode\nTgid:\t%d\nNSpid:\t%d\t%d\n", pid, pid, nspid)
	if err := os.WriteFile(status, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return fp, root, status
}

// TestStackPerfMapNSpid: a process in a PID namespace writes its perf map
// under the PID it has there, the last NSpid value of its status.
func TestStackPerfMapNSpid(t *testing.T) {
	const pid, nspid = 4242, 7
	fp, root, _ := nsJITProcess(t, pid, nspid)
	writePerfMap(t, root, nspid, false, "7f0000000100 100 JS:*inContainer")
	s := fp.symbolizer("testdata/kallsyms.txt")
	checkFrames(t, s.Stack(pid, nil, []uint64{0x7f0000000180}).Frames, []wantFrame{{"JS:*inContainer", ReasonNone, ""}})
}

// TestPerfMapNSpidReadOnce: the PID a process has in its own namespace is
// read from its status once, not at every look for its perf map: with
// the status gone after the first look, a perf map written later under
// that PID is still found.
func TestPerfMapNSpidReadOnce(t *testing.T) {
	const pid, nspid = 4243, 9
	s, root, status, now := clockedJITProcess(t, pid, nspid)
	ips := []uint64{0x7f0000000180}
	checkFrames(t, s.Stack(pid, nil, ips).Frames, []wantFrame{{"", ReasonNoSymbol, ""}})
	if err := os.Remove(status); err != nil {
		t.Fatal(err)
	}
	writePerfMap(t, root, nspid, false, "7f0000000100 100 JS:*later")
	*now = now.Add(perfMapCheckInterval)
	checkFrames(t, s.Stack(pid, nil, ips).Frames, []wantFrame{{"JS:*later", ReasonNone, ""}})
}

// clockedJITProcess is nsJITProcess with a symbolizer over it whose
// clock is *now (from time.Unix(1000, 0)), with no unasked reads on real
// timers.
func clockedJITProcess(t *testing.T, pid, nspid uint32) (s *Symbolizer, root, status string, now *time.Time) {
	t.Helper()
	fp, root, status := nsJITProcess(t, pid, nspid)
	s = fp.symbolizer("testdata/kallsyms.txt")
	clock := time.Unix(1000, 0)
	s.procs.now = func() time.Time { return clock }
	s.procs.settle = nil
	return s, root, status, &clock
}

// TestPerfMapAbsentBackoff: a process whose executable memory has no
// perf map is looked at again after waits that double from
// perfMapCheckInterval, up to perfMapAbsentMax: a map written late is
// still found, at the next look.
func TestPerfMapAbsentBackoff(t *testing.T) {
	const pid, nspid = 4244, 11
	s, root, _, now := clockedJITProcess(t, pid, nspid)
	ips := []uint64{0x7f0000000180}
	look := func(at time.Duration, want string) {
		t.Helper()
		*now = time.Unix(1000, 0).Add(at)
		reason := ReasonNone
		if want == "" {
			reason = ReasonNoSymbol
		}
		checkFrames(t, s.Stack(pid, nil, ips).Frames, []wantFrame{{want, reason, ""}})
	}
	// Looks at 0, 100 ms, 300 ms (200 after), 700 ms, 1.5 s, 3.1 s, 6.3 s,
	// then every 5 s: 11.3 s, 16.3 s.
	// A map written just before a look's due time is found at that look,
	// not before: without the waits it would be found a millisecond after
	// it was written, with longer ones later than due.
	at := time.Duration(0)
	for _, wait := range []time.Duration{100, 200, 400, 800, 1600, 3200, 5000, 5000} {
		look(at, "")
		at += wait * time.Millisecond
	}
	look(at-2*time.Millisecond, "")
	writePerfMap(t, root, nspid, false, "7f0000000100 100 JS:*late")
	look(at-time.Millisecond, "")
	look(at, "JS:*late")
}

// TestMemfdProgramNotJIT: a memfd file that holds an ELF program is read
// as a binary, and its frames, named or not, are not JIT memory
// (Mapping.JIT), whose unnamed frames the recorder names again later; a
// memfd file that holds no ELF program is.
func TestMemfdProgramNotJIT(t *testing.T) {
	const pid = 91
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(exe, &st); err != nil {
		t.Fatal(err)
	}
	program := procmaps.Entry{Start: 0x7f0000000000, Limit: 0x7f0001000000, Perms: "r-xp", Path: "/memfd:sealed-agent", Inode: st.Ino, Device: st.Dev, Deleted: true}
	jit := procmaps.Entry{Start: 0x7f0002000000, Limit: 0x7f0002100000, Perms: "r-xp", Path: "/memfd:doublemapper", Inode: 78, Deleted: true}
	fp := newFakeProc(t)
	fp.setMaps(pid, program, jit)
	fp.linkMapFile(pid, program, exe)
	code := filepath.Join(t.TempDir(), "jit-code")
	if err := os.WriteFile(code, []byte(strings.Repeat("\xcc", 4096)), 0o644); err != nil {
		t.Fatal(err)
	}
	fp.linkMapFile(pid, jit, code)
	s := fp.symbolizer("testdata/kallsyms.txt")
	frames := s.Stack(pid, nil, []uint64{program.Start + 0x2000, jit.Start + 0x100}).Frames
	if len(frames) < 2 {
		t.Fatalf("frames = %+v, want one of each mapping at least", frames)
	}
	prog, other := frames[0], frames[len(frames)-1]
	if prog.Mapping == nil || prog.Mapping.Path != program.Path || prog.Reason == ReasonNoAccess || prog.Reason == ReasonBadELF {
		t.Fatalf("program frame = %+v, want it read from %s", prog, program.Path)
	}
	if prog.Mapping.JIT() {
		t.Errorf("program frame %+v: Mapping.JIT() = true, want false (an ELF program)", prog)
	}
	if other.Mapping == nil || other.Mapping.Path != jit.Path || !other.Mapping.JIT() {
		t.Errorf("JIT frame = %+v, want Mapping.JIT() true for %s", other, jit.Path)
	}
}
