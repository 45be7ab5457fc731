package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gprofile/gprofile/internal/symbolize/debuginfo"
	"github.com/gprofile/gprofile/internal/symbolize/procmaps"

	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
	"github.com/gprofile/gprofile/internal/symbolize/objfile"
)

// TestStackAfterExit: the binaries of a process are opened when it is
// first seen, so that its addresses are named after it exited and its
// binary was deleted, even though none of them was looked up before.
func TestStackAfterExit(t *testing.T) {
	orig := symtest.BuildProg(t, true)
	bin := filepath.Join(t.TempDir(), "prog")
	copyFile(t, orig, bin)
	const pid, base = 51, 0x555555554000
	text := textMapping(t, bin, base)
	fp := newFakeProc(t)
	fp.setMaps(pid, text)
	s := fp.symbolizer("testdata/kallsyms.txt")
	// First sight: a kernel-only stack does not read the maps, a user
	// address outside the binary does.
	s.Stack(pid, nil, []uint64{0x10})
	if n := s.Stats().Binaries; n != 1 {
		t.Fatalf("after first sight, %d binaries cached, want 1 (opened)", n)
	}
	// The process exits: its /proc directory and its binary go.
	if err := os.RemoveAll(filepath.Join(fp.root, fmt.Sprint(pid))); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	leaf := symtest.ElfSymbol(t, orig, "leaf")
	middle := symtest.ElfSymbol(t, orig, "middle")
	st := s.Stack(pid, nil, []uint64{base + leaf.Value, base + middle.Value + 4})
	checkFrames(t, st.Frames, []wantFrame{{"leaf", ReasonNone, bin}, {"middle", ReasonNone, bin}})
	if st.Frames[0].Mapping.BuildID == "" {
		t.Errorf("no build ID for the mapping of an exited process: %+v", st.Frames[0].Mapping)
	}
	// A later stack of it, with an address in no mapping, cannot re-read
	// the maps: the old ones stay.
	s.procs.now = func() time.Time { return time.Now().Add(time.Hour) }
	s.procs.settle = nil // no unasked reads on real timers
	st = s.Stack(pid, nil, []uint64{0x10, base + leaf.Value + 1})
	checkFrames(t, st.Frames, []wantFrame{{"", ReasonNoMapping, "-"}, {"leaf", ReasonNone, bin}})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestStackPendingClosed: binaries opened at first sight but never looked
// up are closed by Close.
func TestStackPendingClosed(t *testing.T) {
	bin := symtest.BuildProg(t, true)
	fp := newFakeProc(t)
	for pid := uint32(60); pid < 63; pid++ {
		fp.setMaps(pid, textMapping(t, bin, 0x555555554000))
	}
	s := fp.symbolizer("testdata/kallsyms.txt")
	for pid := uint32(60); pid < 63; pid++ {
		s.Stack(pid, nil, []uint64{0x10})
	}
	if s.bins.pending != 1 {
		t.Errorf("%d files pending for one binary mapped by three processes, want 1", s.bins.pending)
	}
	s.Close()
	if s.bins.pending != 0 {
		t.Errorf("%d files pending after Close", s.bins.pending)
	}
}

// TestStackExecDetected: when a process execs, its maps are read again at
// once (not after mapsRereadInterval): /proc/PID/exe changed.
func TestStackExecDetected(t *testing.T) {
	sh := symtest.BuildProg(t, true)
	child := symtest.BuildInline(t)
	const pid = 70
	fp := newFakeProc(t)
	shText := textMapping(t, sh, 0x555555554000)
	childText := textMapping(t, child, 0x565656560000)
	fp.setMaps(pid, shText)
	exe := filepath.Join(fp.root, fmt.Sprint(pid), "exe")
	if err := os.Symlink(sh, exe); err != nil {
		t.Fatal(err)
	}
	s := fp.symbolizer("testdata/kallsyms.txt")
	now := time.Unix(1000, 0)
	s.procs.now = func() time.Time { return now }
	s.procs.settle = nil // no unasked reads on real timers
	leaf := symtest.ElfSymbol(t, sh, "leaf")
	checkFrames(t, s.Stack(pid, nil, []uint64{0x555555554000 + leaf.Value}).Frames,
		[]wantFrame{{"leaf", ReasonNone, sh}})

	// exec: new maps, new exe, 1 ms later.
	fp.setMaps(pid, childText)
	os.Remove(exe)
	os.Symlink(child, exe)
	now = now.Add(time.Millisecond)
	work := symtest.ElfSymbol(t, child, "plain")
	st := s.Stack(pid, nil, []uint64{0x565656560000 + work.Value})
	checkFrames(t, st.Frames, []wantFrame{{"plain", ReasonNone, child}})
}

// TestStackManyMappings: a process with 5,000 mappings of one file is
// read and symbolized in bounded time, the file opened once.
func TestStackManyMappings(t *testing.T) {
	bin := symtest.BuildProg(t, true)
	const pid, n = 80, 5000
	text := textMapping(t, bin, 0)
	span := text.Limit - text.Start + objfile.PageSize
	var entries []procmaps.Entry
	var ips []uint64
	leaf := symtest.ElfSymbol(t, bin, "leaf")
	for i := uint64(0); i < n; i++ {
		e := textMapping(t, bin, 0x7f0000000000+i*span)
		entries = append(entries, e)
		ips = append(ips, e.Start-text.Start+leaf.Value+4)
	}
	fp := newFakeProc(t)
	fp.setMaps(pid, entries...)
	s := fp.symbolizer("testdata/kallsyms.txt")
	start := time.Now()
	st := s.Stack(pid, nil, ips)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("symbolizing %d mappings took %v", n, d)
	}
	for i, f := range st.Frames {
		if f.Function != "leaf" {
			t.Fatalf("frame %d = %+v", i, f)
		}
	}
	if s.Stats().Binaries != 1 || s.bins.pending != 0 {
		t.Errorf("Stats() = %+v, %d pending; want one binary, read", s.Stats(), s.bins.pending)
	}
}

// TestObserveConcurrent runs Observe from one goroutine while Stack runs
// in another (go test -race checks the locking), and checks that a
// process observed while it lived is named after it is gone.
func TestObserveConcurrent(t *testing.T) {
	bin := symtest.BuildProg(t, true)
	libc := symtest.SystemLibc(t)
	const base, libBase = 0x555555554000, 0x7f0000000000
	fp := newFakeProc(t)
	for pid := uint32(100); pid < 140; pid++ {
		fp.setMaps(pid, textMapping(t, bin, base), textMapping(t, libc, libBase))
	}
	s := fp.symbolizer("testdata/kallsyms.txt")
	leaf := symtest.ElfSymbol(t, bin, "leaf")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for pid := uint32(100); pid < 140; pid++ {
			s.Observe(pid)
			s.Observe(pid)
		}
	}()
	for pid := uint32(100); pid < 140; pid += 3 {
		s.Stack(pid, nil, []uint64{base + leaf.Value, libBase + 0x30000})
	}
	<-done
	for pid := uint32(100); pid < 140; pid++ {
		os.RemoveAll(filepath.Join(fp.root, fmt.Sprint(pid)))
	}
	for pid := uint32(100); pid < 140; pid++ {
		if f := s.Stack(pid, nil, []uint64{base + leaf.Value}).Frames[0]; f.Function != "leaf" {
			t.Errorf("pid %d: frame %+v", pid, f)
		}
	}
	if st := s.Stats(); st.Processes != 40 {
		t.Errorf("Stats() = %+v", st)
	}
}

// TestStackBadELFKeepsBuildID: a binary whose symbol table is corrupt
// gives bad-elf frames whose mapping still has the file's build ID and
// offset, for symbolizing them later elsewhere.
func TestStackBadELFKeepsBuildID(t *testing.T) {
	orig := symtest.BuildProg(t, true)
	data, err := os.ReadFile(orig)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	idx := -1
	for i, s := range f.Sections {
		if s.Type == elf.SHT_SYMTAB {
			idx = i
		}
	}
	if idx < 0 {
		t.Fatal("no .symtab")
	}
	shoff := binary.LittleEndian.Uint64(data[40:])
	hdr := shoff + uint64(idx)*uint64(binary.LittleEndian.Uint16(data[58:]))
	binary.LittleEndian.PutUint64(data[hdr+24:], 1<<40) // sh_offset far past the end
	bad := filepath.Join(t.TempDir(), "bad")
	if err := os.WriteFile(bad, data, 0o755); err != nil {
		t.Fatal(err)
	}
	e := textMapping(t, bad, 0x555555554000)
	fp := newFakeProc(t)
	fp.setMaps(7, e)
	st := fp.symbolizer("testdata/kallsyms.txt").Stack(7, nil, []uint64{e.Start + 0x10})
	checkFrames(t, st.Frames, []wantFrame{{"", ReasonBadELF, bad}})
	if m := st.Frames[0].Mapping; m.BuildID != symtest.GnuBuildID(t, orig) || m.Offset != e.Offset || m.BuildID == "" {
		t.Errorf("mapping %+v; want build ID %s and offset %#x", m, symtest.GnuBuildID(t, orig), e.Offset)
	}
}

// TestStackRereadsMapsAfterLoader: the maps read when a process is first
// seen (or has exec'd) hold the program and the dynamic loader, not yet
// the libraries that the loader maps a few hundred µs later. The first
// addresses in them re-read the maps at once, from Stack as from
// ObserveStack, however recent the last read: a short-lived process
// whose samples are symbolized as they come in gets its libraries named.
// After earlyRereads re-reads the usual rate limit applies again, and an
// address in the first page (a stack's end) never re-reads.
func TestStackRereadsMapsAfterLoader(t *testing.T) {
	prog := symtest.BuildProg(t, true)
	lib := symtest.BuildInline(t)
	const pid, base, libBase = 90, 0x555555554000, 0x7f0000000000
	progText := textMapping(t, prog, base)
	libText := textMapping(t, lib, libBase)
	fp := newFakeProc(t)
	fp.setMaps(pid, progText) // at exec: the loader has not run yet
	s := fp.symbolizer("testdata/kallsyms.txt")
	now := time.Unix(1000, 0)
	s.procs.now = func() time.Time { return now } // no time passes
	s.procs.settle = nil                          // no unasked reads on real timers
	s.Observe(pid)
	p := s.procs.m[pid]

	leaf := base + symtest.ElfSymbol(t, prog, "leaf").Value
	plain := libBase + symtest.ElfSymbol(t, lib, "plain").Value
	fp.setMaps(pid, progText, libText) // the loader mapped the library
	st := s.Stack(pid, nil, []uint64{leaf, plain + 1, 0})
	checkFrames(t, st.Frames, []wantFrame{{"leaf", ReasonNone, prog}, {"plain", ReasonNone, lib}, {"", ReasonNoMapping, "-"}})

	// ObserveStack too, for the next library.
	lib2Base := uint64(0x7f1000000000)
	lib2Text := textMapping(t, lib, lib2Base)
	fp.setMaps(pid, progText, libText, lib2Text)
	if s.ObserveStack(pid, []uint64{leaf, lib2Base + symtest.ElfSymbol(t, lib, "plain").Value + 1}) {
		t.Errorf("ObserveStack called settled a stack with an IP in no mapping")
	}
	if p.find(lib2Base+symtest.ElfSymbol(t, lib, "plain").Value) == nil {
		t.Fatalf("ObserveStack did not re-read the maps at once after the first read")
	}

	// An address in the first page reads nothing, whatever the budget.
	read := p.lastRead
	now = now.Add(time.Microsecond)
	s.Stack(pid, nil, []uint64{leaf, 0x10})
	if !p.lastRead.Equal(read) {
		t.Errorf("an address in the first page re-read the maps")
	}

	// Junk addresses use up the early re-reads; then the rate limit holds.
	for i := 0; i < earlyRereads+2; i++ {
		now = now.Add(time.Microsecond)
		s.Stack(pid, nil, []uint64{0x7e0000000000 + uint64(i)*0x1000})
	}
	read = p.lastRead
	now = now.Add(time.Microsecond)
	s.Stack(pid, nil, []uint64{0x7e0000100000})
	if !p.lastRead.Equal(read) {
		t.Errorf("maps re-read %v after the last read, with the early re-reads used up", now.Sub(read))
	}
	now = now.Add(mapsRereadInterval)
	s.Stack(pid, nil, []uint64{0x7e0000200000})
	if p.lastRead.Equal(read) {
		t.Errorf("maps not re-read %v after the last read", now.Sub(read))
	}
}

// execProcess makes process pid run prog in a fake /proc (its maps and
// /proc/PID/exe), with a symbolizer whose clock moves only when the test
// moves *now (and no unasked reads on real timers). exec makes pid run
// bin at start instead, as an exec does, and returns its text mapping.
func execProcess(t *testing.T, pid uint32, prog string) (s *Symbolizer, now *time.Time, exec func(bin string, start uint64) procmaps.Entry) {
	t.Helper()
	fp := newFakeProc(t)
	fp.setMaps(pid, textMapping(t, prog, 0x555555554000))
	exe := filepath.Join(fp.root, fmt.Sprint(pid), "exe")
	if err := os.Symlink(prog, exe); err != nil {
		t.Fatal(err)
	}
	s = fp.symbolizer("testdata/kallsyms.txt")
	clock := time.Unix(1000, 0)
	s.procs.now = func() time.Time { return clock }
	s.procs.settle = nil
	exec = func(bin string, start uint64) procmaps.Entry {
		text := textMapping(t, bin, start)
		fp.setMaps(pid, text)
		os.Remove(exe)
		if err := os.Symlink(bin, exe); err != nil {
			t.Fatal(err)
		}
		return text
	}
	return s, &clock, exec
}

// TestObserveExec: an exec record makes ObserveExec read the new
// program's maps at once, even when a sample of the old program was
// checked an instant before (Observe would wait execCheckInterval); on
// first sight it reads them as Observe does.
func TestObserveExec(t *testing.T) {
	sh := symtest.BuildProg(t, true)
	child := symtest.BuildInline(t)
	const pid = 71
	s, now, exec := execProcess(t, pid, sh)
	s.ObserveExec(pid) // first sight
	p := s.procs.m[pid]
	if p == nil || !p.seen || len(p.maps) != 1 {
		t.Fatalf("first ObserveExec: process %+v, want its maps read", p)
	}
	childText := exec(child, 0x565656560000)
	*now = now.Add(time.Microsecond) // well within execCheckInterval
	s.Observe(pid)
	if p.find(childText.Start) != nil {
		t.Fatal("Observe read the maps within execCheckInterval; the test needs it not to")
	}
	s.ObserveExec(pid)
	if p.find(childText.Start) == nil {
		t.Errorf("ObserveExec did not read the exec'd program's maps")
	}
}

// TestObserveExecReadsAgain: a process first seen after its exec (for a
// sample taken before it, read later: ring order), before the dynamic
// loader had mapped its libraries, has its maps read again at its exec
// record, though its program is the one read: a process that lives a
// few milliseconds lost the frames of its libraries (a 5 ms C program's
// samples cut at libc's return address in 2 of 3) when the record only
// compared /proc/PID/exe.
func TestObserveExecReadsAgain(t *testing.T) {
	prog := symtest.BuildProg(t, true)
	lib := symtest.BuildInline(t)
	const pid = 72
	fp := newFakeProc(t)
	fp.setMaps(pid, textMapping(t, prog, 0x555555554000))
	if err := os.Symlink(prog, filepath.Join(fp.root, fmt.Sprint(pid), "exe")); err != nil {
		t.Fatal(err)
	}
	s := fp.symbolizer("testdata/kallsyms.txt")
	clock := time.Unix(1000, 0)
	s.procs.now = func() time.Time { return clock }
	s.procs.settle = nil
	s.Observe(pid) // first sight: the program alone
	p := s.procs.m[pid]
	libText := textMapping(t, lib, 0x7f0000000000)
	if p == nil || len(p.maps) != 1 || p.find(libText.Start) != nil {
		t.Fatalf("first sight: %+v, want the program's mapping alone", p)
	}
	fp.setMaps(pid, textMapping(t, prog, 0x555555554000), libText) // the loader maps the library
	clock = clock.Add(time.Microsecond)
	s.ObserveExec(pid)
	if p := s.procs.m[pid]; p == nil || p.find(libText.Start) == nil {
		t.Errorf("ObserveExec did not read the maps again: the library the loader mapped is missing")
	}
}

// TestExecBackstop: without exec records, a process's exec is found by
// the stat of /proc/PID/exe once execCheckInterval has passed since the
// last check. With them (SetExecsReported), while no record was lost it
// is not looked for at all (the exec here is one whose record was lost
// unseen); once the records say one was, it is found after
// execBackstopInterval, not after execCheckInterval.
func TestExecBackstop(t *testing.T) {
	sh := symtest.BuildProg(t, true)
	child := symtest.BuildInline(t)
	for _, c := range []struct {
		name                string
		delivered           func() bool
		atCheck, atBackstop bool // exec found after 2*execCheckInterval, after execBackstopInterval more
	}{
		{"not reported", nil, true, true},
		{"reported, none lost", func() bool { return true }, false, false},
		{"reported, one lost", func() bool { return false }, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			const pid = 72
			s, now, exec := execProcess(t, pid, sh)
			s.SetExecsReported(c.delivered)
			s.Observe(pid)
			p := s.procs.m[pid]
			childText := exec(child, 0x565656560000) // an exec whose record was lost
			*now = now.Add(2 * execCheckInterval)
			s.Observe(pid)
			if found := p.find(childText.Start) != nil; found != c.atCheck {
				t.Errorf("after %v: exec found %v, want %v", 2*execCheckInterval, found, c.atCheck)
			}
			*now = now.Add(execBackstopInterval)
			s.Observe(pid)
			if found := p.find(childText.Start) != nil; found != c.atBackstop {
				t.Errorf("after %v more: exec found %v, want %v", execBackstopInterval, found, c.atBackstop)
			}
		})
	}
}

// TestObserveWhileStackReads: while Stack reads a binary (held here in
// the middle of the read), Observe of another process goes on, and the
// binary is read once for the two processes that map it.
func TestObserveWhileStackReads(t *testing.T) {
	bin := symtest.BuildProg(t, true)
	const base = 0x555555554000
	fp := newFakeProc(t)
	fp.setMaps(1, textMapping(t, bin, base))
	fp.setMaps(2, textMapping(t, bin, base))
	s := fp.symbolizer("testdata/kallsyms.txt")
	leaf := symtest.ElfSymbol(t, bin, "leaf")
	reading, release := make(chan struct{}), make(chan struct{})
	var reads atomic.Int32
	loadBinary = func(r io.ReaderAt, opts debuginfo.Options) (*objfile.Binary, error) {
		if reads.Add(1) == 1 {
			close(reading)
			<-release
		}
		return objfile.Load(r, opts)
	}
	t.Cleanup(func() { loadBinary = objfile.Load })
	done := make(chan *Stack)
	go func() { done <- s.Stack(1, nil, []uint64{base + leaf.Value}) }()
	<-reading
	observed := make(chan struct{})
	go func() { s.Observe(2); close(observed) }()
	select {
	case <-observed:
	case <-time.After(5 * time.Second):
		t.Fatal("Observe waited for Stack's read of a binary")
	}
	close(release)
	if f := (<-done).Frames[0]; f.Function != "leaf" {
		t.Errorf("frame %+v, want leaf", f)
	}
	if f := s.Stack(2, nil, []uint64{base + leaf.Value}).Frames[0]; f.Function != "leaf" {
		t.Errorf("pid 2: frame %+v, want leaf", f)
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("the binary was read %d times, want once", n)
	}
}

// TestSettleReadsMaps: after a new program's first maps read, its maps
// are read again unasked (settleDelays), so that a library the loader
// maps next is known even if the process exits before any of its samples
// is looked up: here the library appears, then the process is gone
// (maps unreadable), and only then is its address asked for.
func TestSettleReadsMaps(t *testing.T) {
	prog := symtest.BuildProg(t, true)
	lib := symtest.BuildInline(t)
	const pid = 90
	fp := newFakeProc(t)
	progText := textMapping(t, prog, 0x555555554000)
	libText := textMapping(t, lib, 0x7f0000000000)
	fp.setMaps(pid, progText)
	s := fp.symbolizer("testdata/kallsyms.txt")
	s.procs.settle = []time.Duration{time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond}
	s.ObserveExec(pid) // the exec-time read: the program alone
	fp.setMaps(pid, progText, libText)
	// Wait until the unasked reads have seen the library, then let the
	// process go.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.procs.mu.Lock()
		n := len(s.procs.m[pid].maps)
		s.procs.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("maps never read again unasked: %d mappings known", n)
		}
		time.Sleep(time.Millisecond)
	}
	if err := os.Remove(filepath.Join(fp.root, fmt.Sprint(pid), "maps")); err != nil {
		t.Fatal(err)
	}
	plain := symtest.ElfSymbol(t, lib, "plain")
	st := s.Stack(pid, nil, []uint64{0x7f0000000000 + plain.Value})
	checkFrames(t, st.Frames, []wantFrame{{"plain", ReasonNone, lib}})
}

// TestObserveFork: a process reported forked (ObserveFork) that exited
// before it was first seen is named through its parent's mappings (the
// parent read then, on first sight); one that exec'd is not (its parent's
// mappings are not its program's), nor is one with no fork record; a
// child seen alive has its own maps read.
func TestObserveFork(t *testing.T) {
	bin := symtest.BuildProg(t, true)
	other := symtest.BuildInline(t)
	const base = 0x555555554000
	const parent, gone, execd, unknown, alive = 80, 81, 82, 83, 84
	fp := newFakeProc(t)
	fp.setMaps(parent, textMapping(t, bin, base))
	fp.setMaps(alive, textMapping(t, other, base))
	s := fp.symbolizer("testdata/kallsyms.txt")
	s.procs.settle = nil // no unasked reads on real timers
	for _, pid := range []uint32{gone, execd, alive} {
		s.ObserveFork(pid, parent)
	}
	s.ObserveExec(execd) // exec'd, and gone by now
	leaf := symtest.ElfSymbol(t, bin, "leaf")
	middle := symtest.ElfSymbol(t, bin, "middle")
	ips := []uint64{base + leaf.Value, base + middle.Value + 4}
	checkFrames(t, s.Stack(gone, nil, ips).Frames, []wantFrame{{"leaf", ReasonNone, bin}, {"middle", ReasonNone, bin}})
	for _, pid := range []uint32{execd, unknown} {
		st := s.Stack(pid, nil, ips)
		checkFrames(t, st.Frames, []wantFrame{{"", ReasonProcessGone, "-"}, {"", ReasonProcessGone, "-"}})
	}
	// The parent maps bin, the live child its own program: its own maps count.
	st := s.Stack(alive, nil, ips[:1])
	if len(st.Frames) == 0 || st.Frames[0].Mapping == nil || st.Frames[0].Mapping.Path != other {
		t.Errorf("live child's frame %+v: want it named from its own maps, not its parent's", st.Frames)
	}
	if n := len(s.procs.parents); n != 0 {
		t.Errorf("%d parents left after every child was seen, want 0", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
