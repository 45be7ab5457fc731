package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestStackAfterExit: the binaries of a process are opened when it is
// first seen, so that its addresses are named after it exited and its
// binary was deleted, even though none of them was looked up before.
func TestStackAfterExit(t *testing.T) {
	orig := buildProg(t, true)
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
	leaf := elfSymbol(t, orig, "leaf")
	middle := elfSymbol(t, orig, "middle")
	st := s.Stack(pid, nil, []uint64{base + leaf.Value, base + middle.Value + 4})
	checkFrames(t, st.Frames, []wantFrame{{"leaf", ReasonNone, bin}, {"middle", ReasonNone, bin}})
	if st.Frames[0].Mapping.BuildID == "" {
		t.Errorf("no build ID for the mapping of an exited process: %+v", st.Frames[0].Mapping)
	}
	// A later stack of it, with an address in no mapping, cannot re-read
	// the maps: the old ones stay.
	s.now = func() time.Time { return time.Now().Add(time.Hour) }
	st = s.Stack(pid, nil, []uint64{0x10, base + leaf.Value + 1})
	checkFrames(t, st.Frames, []wantFrame{{"", ReasonNoMapping, "-"}, {"leaf", ReasonNone, bin}})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestStackPendingClosed: binaries opened at first sight but never looked
// up are closed by Close.
func TestStackPendingClosed(t *testing.T) {
	bin := buildProg(t, true)
	fp := newFakeProc(t)
	for pid := uint32(60); pid < 63; pid++ {
		fp.setMaps(pid, textMapping(t, bin, 0x555555554000))
	}
	s := fp.symbolizer("testdata/kallsyms.txt")
	for pid := uint32(60); pid < 63; pid++ {
		s.Stack(pid, nil, []uint64{0x10})
	}
	if s.pending != 1 {
		t.Errorf("%d files pending for one binary mapped by three processes, want 1", s.pending)
	}
	s.Close()
	if s.pending != 0 {
		t.Errorf("%d files pending after Close", s.pending)
	}
}

// TestStackExecDetected: when a process execs, its maps are read again at
// once (not after mapsRereadInterval): /proc/PID/exe changed.
func TestStackExecDetected(t *testing.T) {
	sh := buildProg(t, true)
	child := buildInline(t)
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
	s.now = func() time.Time { return now }
	leaf := elfSymbol(t, sh, "leaf")
	checkFrames(t, s.Stack(pid, nil, []uint64{0x555555554000 + leaf.Value}).Frames,
		[]wantFrame{{"leaf", ReasonNone, sh}})

	// exec: new maps, new exe, 1 ms later.
	fp.setMaps(pid, childText)
	os.Remove(exe)
	os.Symlink(child, exe)
	now = now.Add(time.Millisecond)
	work := elfSymbol(t, child, "plain")
	st := s.Stack(pid, nil, []uint64{0x565656560000 + work.Value})
	checkFrames(t, st.Frames, []wantFrame{{"plain", ReasonNone, child}})
}

// TestStackManyMappings: a process with 5,000 mappings of one file is
// read and symbolized in bounded time, the file opened once.
func TestStackManyMappings(t *testing.T) {
	bin := buildProg(t, true)
	const pid, n = 80, 5000
	text := textMapping(t, bin, 0)
	span := text.Limit - text.Start + pageSize
	var entries []MapsEntry
	var ips []uint64
	leaf := elfSymbol(t, bin, "leaf")
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
	if s.Stats().Binaries != 1 || s.pending != 0 {
		t.Errorf("Stats() = %+v, %d pending; want one binary, read", s.Stats(), s.pending)
	}
}

// TestObserveConcurrent runs Observe from one goroutine while Stack runs
// in another (go test -race checks the locking), and checks that a
// process observed while it lived is named after it is gone.
func TestObserveConcurrent(t *testing.T) {
	bin := buildProg(t, true)
	libc := systemLibc(t)
	const base, libBase = 0x555555554000, 0x7f0000000000
	fp := newFakeProc(t)
	for pid := uint32(100); pid < 140; pid++ {
		fp.setMaps(pid, textMapping(t, bin, base), textMapping(t, libc, libBase))
	}
	s := fp.symbolizer("testdata/kallsyms.txt")
	leaf := elfSymbol(t, bin, "leaf")
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
	orig := buildProg(t, true)
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
	if m := st.Frames[0].Mapping; m.BuildID != gnuBuildID(t, orig) || m.Offset != e.Offset || m.BuildID == "" {
		t.Errorf("mapping %+v; want build ID %s and offset %#x", m, gnuBuildID(t, orig), e.Offset)
	}
}
