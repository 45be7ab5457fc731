package symbolize

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gprofile/gprofile/internal/symbolize/procmaps"

	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"

	"golang.org/x/sys/unix"
)

// fakeProc is a procfs tree in a temporary directory: <root>/PID/maps,
// <root>/PID/root (a link to "/") and <root>/PID/map_files.
type fakeProc struct {
	t    *testing.T
	root string
}

func newFakeProc(t *testing.T) *fakeProc {
	return &fakeProc{t: t, root: t.TempDir()}
}

// setMaps creates process pid, or rewrites its maps, with entries.
func (f *fakeProc) setMaps(pid uint32, entries ...procmaps.Entry) {
	f.t.Helper()
	dir := filepath.Join(f.root, fmt.Sprint(pid))
	if err := os.MkdirAll(filepath.Join(dir, "map_files"), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "root")); err != nil {
		if err := os.Symlink("/", filepath.Join(dir, "root")); err != nil {
			f.t.Fatal(err)
		}
	}
	var sb strings.Builder
	for _, e := range entries {
		fmt.Fprintf(&sb, "%x-%x %s %08x %02x:%02x %d                    %s",
			e.Start, e.Limit, e.Perms, e.Offset, unix.Major(e.Device), unix.Minor(e.Device), e.Inode, e.Path)
		if e.Deleted {
			sb.WriteString(procmaps.DeletedSuffix)
		}
		sb.WriteByte('\n')
	}
	if err := os.WriteFile(filepath.Join(dir, "maps"), []byte(sb.String()), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// linkMapFile makes <root>/PID/map_files/<start>-<limit> point at target.
func (f *fakeProc) linkMapFile(pid uint32, e procmaps.Entry, target string) {
	f.t.Helper()
	name := filepath.Join(f.root, fmt.Sprint(pid), "map_files", fmt.Sprintf("%x-%x", e.Start, e.Limit))
	if err := os.Symlink(target, name); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeProc) symbolizer(kallsyms string) *Symbolizer {
	f.t.Helper()
	s, err := New(Options{ProcRoot: f.root, KallsymsPath: kallsyms})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { s.Close() })
	return s
}

// wantFrame is the part of a Frame a test checks.
type wantFrame struct {
	function string
	reason   Reason
	path     string // Mapping.Path; "-" for a nil Mapping
}

func checkFrames(t *testing.T, got []Frame, want []wantFrame) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d frames, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		f := got[i]
		path := "-"
		if f.Mapping != nil {
			path = f.Mapping.Path
		}
		if f.Function != w.function || f.Reason != w.reason || path != w.path {
			t.Errorf("frame %d (%#x) = %q %v in %q; want %q %v in %q",
				i, f.Address, f.Function, f.Reason, path, w.function, w.reason, w.path)
		}
	}
}

func TestStackFakeProc(t *testing.T) {
	bin := symtest.BuildProg(t, true)
	const pid, base = 42, 0x555555554000
	text := textMapping(t, bin, base)
	vdso := procmaps.Entry{Start: 0x7ffd5a1f0000, Limit: 0x7ffd5a1f2000, Perms: "r-xp", Path: "[vdso]"}
	jit := procmaps.Entry{Start: 0x7f0000400000, Limit: 0x7f0000500000, Perms: "rwxp"}
	fp := newFakeProc(t)
	fp.setMaps(pid, text, vdso, jit)
	s := fp.symbolizer("testdata/kallsyms.txt")
	leaf := symtest.ElfSymbol(t, bin, "leaf")
	mangled := symtest.ElfSymbol(t, bin, "_ZN2ns7mangledEi")
	kernel := []uint64{0xffffffff81002010, 0xffffffff81000100, 0xffffffffc0001150, 0x1000}
	user := []uint64{
		base + leaf.Value + 4,         // leaf
		base + leaf.Value + leaf.Size, // return address just past leaf: still leaf
		base + mangled.Value,          // return address at a function's start: not it
		vdso.Start + 0x10, jit.Start + 0x10, 0x10,
	}
	beforeMangled := wantFrame{"", ReasonNoSymbol, bin} // the padding before it
	if middle := symtest.ElfSymbol(t, bin, "middle"); middle.Value+middle.Size == mangled.Value {
		beforeMangled = wantFrame{"middle", ReasonNone, bin}
	}
	st := s.Stack(pid, kernel, user)
	checkFrames(t, st.Frames, []wantFrame{
		{"do_syscall_64", ReasonNone, "[kernel.kallsyms]"},
		{"startup_64", ReasonNone, "[kernel.kallsyms]"}, // a return address: 0x...100 - 1
		{"ext4_bar", ReasonNone, "[ext4]"},
		{"", ReasonNoMapping, "-"},
		{"leaf", ReasonNone, bin},
		{"leaf", ReasonNone, bin},
		beforeMangled,
		{"", ReasonNoSymbol, "[vdso]"},
		{"", ReasonNoSymbol, ""},
		{"", ReasonNoMapping, "-"},
	})
	f := st.Frames
	if f[5].Address != user[1] || f[5].SymbolStart != base+leaf.Value || f[4].Mapping != f[5].Mapping {
		t.Errorf("frame 5 = %+v; want Address %#x, SymbolStart %#x, shared mapping", f[5], user[1], base+leaf.Value)
	}
	if !f[0].Kernel || f[4].Kernel || f[0].SymbolStart != 0xffffffff81002000 {
		t.Errorf("kernel frame %+v or user frame %+v wrong", f[0], f[4])
	}
	if m := f[4].Mapping; m.BuildID != symtest.GnuBuildID(t, bin) || m.Start != text.Start || m.Inode != text.Inode || m.Device != text.Device {
		t.Errorf("user mapping = %+v; want %+v with the build ID", m, text)
	}
	if s.Note() != "" {
		t.Errorf("Note() = %q with readable kallsyms", s.Note())
	}
	stats := s.Stats()
	if stats.Named() != 5 || stats.Unnamed() != 5 || stats.Frames[ReasonNoMapping] != 2 || stats.Processes != 1 || stats.Binaries != 1 {
		t.Errorf("Stats() = %+v", stats)
	}
	again := s.Stack(pid, kernel, user) // from the caches
	for i := range again.Frames {
		if again.Frames[i] != st.Frames[i] {
			t.Errorf("cached frame %d = %+v, want %+v", i, again.Frames[i], st.Frames[i])
		}
	}
}

func TestStackDeletedUsesMapFiles(t *testing.T) {
	bin := symtest.BuildProg(t, true)
	const pid, base = 7, 0x7f1234560000
	e := textMapping(t, bin, base)
	e.Path, e.Deleted = "/gone/prog", true
	fp := newFakeProc(t)
	fp.setMaps(pid, e)
	fp.linkMapFile(pid, e, bin)
	s := fp.symbolizer("testdata/kallsyms.txt")
	leaf := symtest.ElfSymbol(t, bin, "leaf")
	st := s.Stack(pid, nil, []uint64{base + leaf.Value})
	checkFrames(t, st.Frames, []wantFrame{{"leaf", ReasonNone, "/gone/prog"}})
}

func TestStackUnreadableBinaries(t *testing.T) {
	bin := symtest.BuildProg(t, true)
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(t.TempDir(), "truncated")
	if err := os.WriteFile(truncated, data[:len(data)/3], 0o755); err != nil {
		t.Fatal(err)
	}
	bad := textMapping(t, bin, 0x555555554000)
	bad.Path = truncated
	bad.Device, bad.Inode = 1, 99
	missing := procmaps.Entry{Start: 0x7f0000000000, Limit: 0x7f0000001000, Perms: "r-xp", Device: 1, Inode: 100, Path: "/no/such/lib.so"}
	fp := newFakeProc(t)
	fp.setMaps(3, bad, missing)
	s := fp.symbolizer("testdata/kallsyms.txt")
	st := s.Stack(3, nil, []uint64{bad.Start + 0x10, missing.Start + 0x10})
	checkFrames(t, st.Frames, []wantFrame{
		{"", ReasonBadELF, truncated},
		{"", ReasonNoAccess, "/no/such/lib.so"},
	})
}

func TestStackRereadsMaps(t *testing.T) {
	bin := symtest.BuildProg(t, true)
	const pid, base = 9, 0x555555554000
	text := textMapping(t, bin, base)
	fp := newFakeProc(t)
	fp.setMaps(pid) // nothing mapped yet: the process is about to exec
	s := fp.symbolizer("testdata/kallsyms.txt")
	now := time.Unix(1000, 0)
	s.procs.now = func() time.Time { return now }
	s.procs.settle = nil // no unasked reads on real timers
	addr := base + symtest.ElfSymbol(t, bin, "middle").Value
	checkFrames(t, s.Stack(pid, nil, []uint64{addr}).Frames, []wantFrame{{"", ReasonNoMapping, "-"}})
	fp.setMaps(pid, text)
	now = now.Add(minMapsReread / 2)
	checkFrames(t, s.Stack(pid, nil, []uint64{addr}).Frames, []wantFrame{{"", ReasonNoMapping, "-"}})
	now = now.Add(mapsRereadInterval)
	checkFrames(t, s.Stack(pid, nil, []uint64{addr}).Frames, []wantFrame{{"middle", ReasonNone, bin}})

	// The binary is replaced by another mapping at the same place: the
	// address cache must not keep the old name.
	other := procmaps.Entry{Start: text.Start, Limit: text.Limit, Perms: "r-xp", Path: "[anon:jit]"}
	fp.setMaps(pid, other)
	now = now.Add(mapsRereadInterval)
	s.procs.readMaps(s.procs.m[pid])
	checkFrames(t, s.Stack(pid, nil, []uint64{addr}).Frames, []wantFrame{{"", ReasonNoSymbol, "[anon:jit]"}})
}

func TestStackProcessGone(t *testing.T) {
	fp := newFakeProc(t)
	s := fp.symbolizer("testdata/kallsyms.txt")
	st := s.Stack(12345, []uint64{0xffffffff81002010}, []uint64{0x401000, 0x401100})
	checkFrames(t, st.Frames, []wantFrame{
		{"do_syscall_64", ReasonNone, "[kernel.kallsyms]"},
		{"", ReasonProcessGone, "-"},
		{"", ReasonProcessGone, "-"},
	})
	if n := s.Stats().Processes; n != 1 {
		t.Errorf("Stats().Processes = %d, want 1", n)
	}
	s.Forget(12345)
	if n := s.Stats().Processes; n != 0 {
		t.Errorf("after Forget, Stats().Processes = %d, want 0", n)
	}
}

func TestStackKernelHidden(t *testing.T) {
	fp := newFakeProc(t)
	s := fp.symbolizer("testdata/kallsyms_hidden.txt")
	st := s.Stack(1, []uint64{0xffffffff81002010, 0xffffffffc0001150}, nil)
	checkFrames(t, st.Frames, []wantFrame{
		{"", ReasonKernelHidden, "[kernel.kallsyms]"},
		{"", ReasonKernelHidden, "[kernel.kallsyms]"},
	})
	note := s.Note()
	for _, want := range []string{"kptr_restrict", "root", "kallsyms_hidden.txt"} {
		if !strings.Contains(note, want) {
			t.Errorf("Note() = %q; want it to mention %q", note, want)
		}
	}
}

func TestStackKernelUnreadable(t *testing.T) {
	fp := newFakeProc(t)
	s := fp.symbolizer(filepath.Join(fp.root, "no-kallsyms"))
	st := s.Stack(1, []uint64{0xffffffff81002010}, nil)
	checkFrames(t, st.Frames, []wantFrame{{"", ReasonNoSymbol, "[kernel.kallsyms]"}})
	if !strings.Contains(s.Note(), "no-kallsyms") {
		t.Errorf("Note() = %q; want the error", s.Note())
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close() = %v", err)
	}
}

func TestHiddenNote(t *testing.T) {
	for _, tt := range []struct{ restrict, paranoid, want string }{
		{"2", "2", "kptr_restrict=2 hides them even from root"},
		{"1", "2", "kptr_restrict=1 hides them from users without CAP_SYSLOG; run as root"},
		{"0", "2", "kernel.perf_event_paranoid=2 hides them"},
		{"", "", "kptr_restrict=? hides them"},
	} {
		root := t.TempDir()
		if tt.restrict != "" {
			dir := filepath.Join(root, "sys/kernel")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(dir, "kptr_restrict"), []byte(tt.restrict+"\n"), 0o644)
			os.WriteFile(filepath.Join(dir, "perf_event_paranoid"), []byte(tt.paranoid+"\n"), 0o644)
		}
		note := hiddenNote("/proc/kallsyms", root)
		if !strings.Contains(note, tt.want) || !strings.Contains(note, "root") {
			t.Errorf("kptr_restrict=%q: note %q; want it to contain %q", tt.restrict, note, tt.want)
		}
	}
}

// TestForgetSweepsBinaries: a binary stays cached while some process maps
// it, and is dropped (at the next sweep) once every such process is
// forgotten.
func TestForgetSweepsBinaries(t *testing.T) {
	bin := symtest.BuildProg(t, true)
	text := textMapping(t, bin, 0x555555554000)
	fp := newFakeProc(t)
	fp.setMaps(20, text)
	fp.setMaps(21, text)
	s := fp.symbolizer("testdata/kallsyms.txt")
	now := time.Unix(1000, 0)
	s.procs.now = func() time.Time { return now }
	s.procs.settle = nil // no unasked reads on real timers
	addr := text.Start + 0x10
	s.Stack(20, nil, []uint64{addr})
	s.Stack(21, nil, []uint64{addr})
	if n := s.Stats().Binaries; n != 1 {
		t.Fatalf("%d binaries cached, want 1", n)
	}
	now = now.Add(sweepEvery)
	s.Forget(20)
	if n := s.Stats().Binaries; n != 1 {
		t.Errorf("after forgetting one of two users: %d binaries, want 1", n)
	}
	now = now.Add(sweepEvery)
	s.Forget(21)
	if n := s.Stats().Binaries; n != 0 {
		t.Errorf("after forgetting every user: %d binaries, want 0", n)
	}
}

// TestObserveStackRereadsMaps: maps read at exec time lack a library the
// dynamic loader maps next; a sample with its leaf there makes
// ObserveStack read the maps again at once, so that the process is named
// after it has exited (its maps gone).
func TestObserveStackRereadsMaps(t *testing.T) {
	bin := symtest.BuildProg(t, true)
	const pid, base = 9, 0x555555554000
	text := textMapping(t, bin, base)
	fp := newFakeProc(t)
	fp.setMaps(pid) // at exec: the program's text not mapped yet
	s := fp.symbolizer("testdata/kallsyms.txt")
	now := time.Unix(1000, 0)
	s.procs.now = func() time.Time { return now }
	s.procs.settle = nil // no unasked reads on real timers
	s.Observe(pid)
	addr := base + symtest.ElfSymbol(t, bin, "middle").Value
	fp.setMaps(pid, text)
	now = now.Add(mapsRereadInterval)
	if s.ObserveStack(pid, []uint64{addr}) {
		t.Errorf("ObserveStack called settled a stack whose IP was in no mapping")
	}
	fp.setMaps(pid) // exited: what /proc says now must not matter
	s.procs.m[pid].reread = time.Hour
	checkFrames(t, s.Stack(pid, nil, []uint64{addr}).Frames, []wantFrame{{"middle", ReasonNone, bin}})

	// With every IP known there is nothing to read, even when the rate
	// limit would allow it.
	p := s.procs.m[pid]
	p.reread = 0
	read := p.lastRead
	now = now.Add(mapsRereadInterval)
	if !s.ObserveStack(pid, []uint64{addr, addr}) {
		t.Errorf("ObserveStack did not call a stack of mapped IPs settled")
	}
	if !p.lastRead.Equal(read) {
		t.Errorf("ObserveStack re-read the maps of a sample it could name")
	}
	// A stack that ends in 0 (or anything in the first page) is settled
	// by it, and reads nothing.
	if !s.ObserveStack(pid, []uint64{addr, addr, 0}) || !p.lastRead.Equal(read) {
		t.Errorf("a stack that ends in 0: not settled, or the maps re-read")
	}
	// An IP in no mapping makes it read them, and is not settled.
	if s.ObserveStack(pid, []uint64{addr, 0x7f0000001000}) {
		t.Errorf("ObserveStack called settled a stack with an IP in no mapping")
	}
	if p.lastRead.Equal(read) {
		t.Errorf("ObserveStack did not re-read the maps for an IP in no mapping")
	}
	if s.ObserveStack(pid+1, []uint64{addr}) {
		t.Errorf("ObserveStack called settled the stack of a process it had not seen")
	}
}
