package recorder

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/output"
	"github.com/gprofile/gprofile/internal/symbolize"
)

// TestCollectorEvictsExited: a process's stack memo is dropped evictDelay
// after its exit record, not before, and its samples stay aggregated.
func TestCollectorEvictsExited(t *testing.T) {
	sym, err := symbolize.New(symbolize.Options{ProcRoot: t.TempDir(), KallsymsPath: os.DevNull})
	if err != nil {
		t.Fatal(err)
	}
	c := newCollector(sym, nil, false, nil)
	sec := uint64(time.Second)
	sample := func(pid uint32, at uint64, flags uint32) *attach.Sample {
		return &attach.Sample{PID: pid, TID: pid, TimeNs: at, Period: 1, Flags: flags, Comm: []byte("w"), UserIPs: []uint64{0x1000}}
	}
	c.add(sample(7, 1*sec, 0))
	c.add(sample(8, 1*sec, 0))
	c.add(sample(7, 2*sec, attach.FlagProcessExit))
	c.add(sample(8, 3*sec, 0)) // 1 s after the exit: kept
	if c.stacks[7] == nil {
		t.Fatal("pid 7 evicted before evictDelay")
	}
	c.add(sample(8, 2*sec+uint64(evictDelay)+1, 0))
	if c.stacks[7] != nil || c.stacks[8] == nil || len(c.exited) != 0 {
		t.Errorf("after evictDelay: memo of 7 %v, of 8 %v, pending %v", c.stacks[7] != nil, c.stacks[8] != nil, c.exited)
	}
	if n, _ := c.agg.Total(); n != 4 || c.samples != 4 {
		t.Errorf("aggregated %d samples, counted %d; want 4 (the exit record is no sample)", n, c.samples)
	}
}

// TestCanonicalStacks: the same code of the same binary in two processes
// (different load addresses) shares one stack; JIT code does not.
func TestCanonicalStacks(t *testing.T) {
	c := newCollector(nil, nil, false, nil)
	lib := func(start uint64) *symbolize.Mapping {
		return &symbolize.Mapping{Start: start, Limit: start + 0x1000, Offset: 0x2000, Path: "/lib/x.so", Device: 1, Inode: 2}
	}
	stack := func(m *symbolize.Mapping, off uint64) *symbolize.Stack {
		return &symbolize.Stack{Frames: []symbolize.Frame{{Address: m.Start + off, Function: "f", Mapping: m}}}
	}
	a := c.agg.InternStack(1, stack(lib(0x10000), 0x10))
	b := c.agg.InternStack(2, stack(lib(0x70000), 0x10))
	if a != b {
		t.Error("same binary, same offset, two pids: two stacks")
	}
	if c.agg.InternStack(2, stack(lib(0x70000), 0x20)) == a {
		t.Error("another offset shares the stack")
	}
	anon := func(pid uint32) output.StackID {
		m := &symbolize.Mapping{Start: 0x5000, Limit: 0x6000, Path: "[anon]"}
		return c.agg.InternStack(pid, stack(m, 0x10))
	}
	if anon(1) == anon(2) {
		t.Error("JIT code of two processes shares a stack")
	}
}

// TestSettledStacks: the reader's table of settled stacks knows a stack
// once added, tells pids and IPs apart, and forgets everything on clear.
func TestSettledStacks(t *testing.T) {
	var s settledStacks
	a := s.key(7, []uint64{0x401000, 0x401100})
	if a == 0 || s.has(a) {
		t.Fatalf("key %#x: zero, or known before add", a)
	}
	s.add(a)
	if !s.has(a) {
		t.Error("added key not found")
	}
	for _, other := range []uint64{
		s.key(8, []uint64{0x401000, 0x401100}),
		s.key(7, []uint64{0x401000, 0x401104}),
		s.key(7, []uint64{0x401000}),
	} {
		if other == a || s.has(other) {
			t.Errorf("key %#x of another stack matches %#x", other, a)
		}
	}
	s.clear()
	if s.has(a) {
		t.Error("key found after clear")
	}
}

// TestCollectorCountsKeptFrames: the unnamed-frame counts of the summary
// are those of the frames kept, after the junk cut: a stack whose leaf
// (in anonymous code: no symbol) is followed by two frame-pointer junk
// addresses in no mapping counts one frame, not three.
func TestCollectorCountsKeptFrames(t *testing.T) {
	_, sym := fakeProcess(t, 7, "00400000-00401000 r-xp 00000000 00:00 0 \n")
	c := newCollector(sym, nil, false, nil)
	c.add(&attach.Sample{PID: 7, TID: 7, TimeNs: 1, Period: 1, Comm: []byte("w"),
		UserIPs: []uint64{0x400010, 0x7000000, 0x7001000}})
	var kept uint64
	for _, n := range c.frames.Frames {
		kept += n
	}
	if kept != 1 || c.frames.Frames[symbolize.ReasonNoMapping] != 0 {
		t.Errorf("frames counted %v, want the leaf alone (the junk cut)", c.frames.Frames)
	}
	if all := sym.Stats(); all.Frames[symbolize.ReasonNoMapping] == 0 {
		t.Errorf("the symbolizer saw no junk frame (%v): the test does not test the cut", all.Frames)
	}
}

// TestCollectorRetriesUnnamedJIT: a stack whose JIT frame the perf map
// did not name at first sight is symbolized again jitRetry later, so that
// a perf map line written after the code first ran names its later
// samples; before jitRetry the memo holds.
func TestCollectorRetriesUnnamedJIT(t *testing.T) {
	const pid = 90
	root, sym := fakeProcess(t, pid, "7f0000000000-7f0000100000 rwxp 00000000 00:00 0 \n")
	perfMap := filepath.Join(root, "90", "root", "tmp", "perf-90.map")
	if err := os.WriteFile(perfMap, []byte("7f0000050000 10 other\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := newCollector(sym, nil, false, nil)
	const t0 = uint64(5e9)
	add := func(at uint64) {
		c.add(&attach.Sample{PID: pid, TID: pid, TimeNs: at, Period: 1, Comm: []byte("node"),
			UserIPs: []uint64{0x7f0000001010}})
	}
	add(t0)
	if err := os.WriteFile(perfMap, []byte("7f0000050000 10 other\n7f0000001000 100 LazyCompile:*hot\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond) // the symbolizer's own wait between two reads of the perf map
	add(t0 + uint64(jitRetry)/2)       // the memo: still unnamed
	add(t0 + uint64(jitRetry))         // symbolized again: named
	add(t0 + 2*uint64(jitRetry))       // the memo, named: no more retries
	leaf := map[string]int64{}
	for _, s := range c.agg.Samples() {
		leaf[s.Stack.Frames[0].Function] += s.Count
	}
	if leaf[""] != 2 || leaf["LazyCompile:*hot"] != 2 {
		t.Errorf("samples by leaf function %v, want 2 unnamed (before jitRetry) and 2 LazyCompile:*hot", leaf)
	}
	for _, e := range c.stacks[pid] {
		if e.jitAt != 0 {
			t.Errorf("memo entry %+v still retried once named", e)
		}
	}
}

// fakeProcess makes a /proc of one process pid under a temporary root,
// with maps (/proc/PID/maps lines) and an empty root directory holding
// tmp/, and a symbolizer reading it (no kernel symbols), closed when t
// ends.
func fakeProcess(t *testing.T, pid int, maps string) (root string, sym *symbolize.Symbolizer) {
	t.Helper()
	root = t.TempDir()
	dir := filepath.Join(root, strconv.Itoa(pid))
	if err := os.MkdirAll(filepath.Join(dir, "root", "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "maps"), []byte(maps), 0o644); err != nil {
		t.Fatal(err)
	}
	sym, err := symbolize.New(symbolize.Options{ProcRoot: root, KallsymsPath: os.DevNull})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sym.Close() })
	return root, sym
}

// discard is a Sink that keeps nothing.
type discard struct{}

func (discard) Add(*output.Record) error { return nil }

// TestCollectorLocationMemo: a new raw stack whose addresses were all
// seen before, each at its place (leaf or return address), is interned
// from the location memo, and comes out as the symbolizer names it (a
// collector that streams, and so symbolizes every new raw stack, is the
// oracle), frames counted alike; an exec drops the process's memos.
func TestCollectorLocationMemo(t *testing.T) {
	const pid = 91
	root, sym := fakeProcess(t, pid, "7f0000000000-7f0000100000 rwxp 00000000 00:00 0 \n")
	perfMap := filepath.Join(root, "91", "root", "tmp", "perf-91.map")
	// 0x7f0000002100 is callerA as a leaf, and leafB as a return address
	// (its call instruction ends leafB).
	if err := os.WriteFile(perfMap, []byte("7f0000001000 100 leafA\n7f0000002000 100 leafB\n7f0000002100 100 callerA\n7f0000004000 100 callerB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const k1, k2 = 0xffffffff81000010, 0xffffffff81000020
	stacks := []struct{ kernel, user []uint64 }{
		{nil, []uint64{0x7f0000002100, 0x7f0000004010}},
		{[]uint64{k1}, []uint64{0x7f0000001010, 0x7f0000002100}},
		{nil, []uint64{0x7f0000002100, 0x7f0000002100}},          // from the memo
		{[]uint64{k1}, []uint64{0x7f0000001010, 0x7f0000004010}}, // from the memo
		{nil, []uint64{0x7f0000004010, 0x7f0000001010}},          // new places: symbolized
		{[]uint64{k2, k1}, []uint64{0x7f0000002100}},             // k1 new as a return address
		{[]uint64{k1}, []uint64{0x7f0000002010, 0x7f0000004010}}, // a new leaf, named alone
		{nil, []uint64{0x7f0000005000, 0x7f0000004010}},          // a new leaf in JIT code no line names
		// New return addresses amid known ones, each named alone: one,
		// then one in each part (k2 and leafA as return addresses).
		{[]uint64{k1}, []uint64{0x7f0000001010, 0x7f0000002010, 0x7f0000004010}},
		{[]uint64{k1, k2}, []uint64{0x7f0000001010, 0x7f0000002100, 0x7f0000001010, 0x7f0000004010}},
	}
	run := func(stream Sink) (*collector, map[string]int64) {
		c := newCollector(sym, nil, false, stream)
		for i, st := range stacks {
			c.add(&attach.Sample{PID: pid, TID: pid, TimeNs: uint64(i + 1), Period: 1, Comm: []byte("jit"),
				Flags: attach.FlagUserRegs, KernelIPs: st.kernel, UserIPs: st.user})
		}
		got := map[string]int64{}
		for _, s := range c.agg.Samples() {
			var names []string
			for _, f := range s.Stack.Frames {
				names = append(names, fmt.Sprintf("%s@%#x", f.Function, f.Address))
			}
			got[strings.Join(names, ";")] += s.Count
		}
		return c, got
	}
	c, got := run(nil)
	oracle, want := run(discard{})
	if c.byAddr != 7 || oracle.byAddr != 0 {
		t.Errorf("stacks from the location memo: %d (want 7), with a stream %d (want 0)", c.byAddr, oracle.byAddr)
	}
	jit := func(c *collector) (n int) {
		for _, e := range c.stacks[pid] {
			if e.jitAt != 0 {
				n++
			}
		}
		return n
	}
	if jit(c) != 1 || jit(oracle) != 1 {
		t.Errorf("stacks to symbolize again (unnamed JIT code): %d, symbolized each %d; want 1", jit(c), jit(oracle))
	}
	if _, ok := c.addrs[pid][addrKey(0, 0x7f0000005000)]; ok {
		t.Errorf("the unnamed JIT leaf is in the location memo")
	}
	if !maps.Equal(got, want) || len(got) != len(stacks) {
		t.Errorf("stacks with the location memo:\n%v\nsymbolized each:\n%v", got, want)
	}
	if c.frames != oracle.frames {
		t.Errorf("frames counted %v, symbolized each %v", c.frames.Frames, oracle.frames.Frames)
	}
	c.add(&attach.Sample{PID: pid, TID: pid, TimeNs: 10, Flags: attach.FlagProcessExec})
	if c.stacks[pid] != nil || c.addrs[pid] != nil || len(c.kaddrs) == 0 {
		t.Errorf("after an exec: stack memo %v, location memo %v (want none); kernel addresses %d (want kept)", c.stacks[pid], c.addrs[pid], len(c.kaddrs))
	}
}

// TestCollectorEntryShortcut: samples of one raw stack go straight to the
// aggregate's entry of the last one (Aggregator.AddToEntry) only while
// their key is the same: another thread name, or another thread or CPU
// when the aggregate keys by them, gets an entry of its own, and every
// entry counts its own samples.
func TestCollectorEntryShortcut(t *testing.T) {
	sym, err := symbolize.New(symbolize.Options{ProcRoot: t.TempDir(), KallsymsPath: os.DevNull})
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		tid, cpu uint32
		comm     string
	}
	samples := []key{{1, 0, "a"}, {1, 0, "a"}, {2, 0, "a"}, {1, 1, "a"}, {1, 0, "b"}, {1, 0, "a"}, {2, 1, "a"}}
	for _, labels := range [][]string{nil, {output.LabelTID, output.LabelCPU}} {
		c := newCollector(sym, labels, false, nil)
		want := map[key]int64{}
		for _, k := range samples {
			c.add(&attach.Sample{PID: 7, TID: k.tid, CPU: k.cpu, Period: 10, Comm: []byte(k.comm), UserIPs: []uint64{0x1000, 0x2000}})
			if labels == nil {
				k.tid, k.cpu = 0, 0
			}
			want[k]++
		}
		got := map[key]int64{}
		for _, s := range c.agg.Samples() {
			if s.Nanos != 10*s.Count {
				t.Errorf("labels %v: %+v weighs %d ns for %d samples", labels, s, s.Nanos, s.Count)
			}
			got[key{s.TID, s.CPU, s.Comm}] += s.Count
		}
		if !maps.Equal(got, want) {
			t.Errorf("labels %v: aggregated %v, want %v", labels, got, want)
		}
	}
}
