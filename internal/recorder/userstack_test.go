package recorder

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/symbolize"
	"github.com/gprofile/gprofile/internal/unwind"
)

// fakeTops is a sampler's stack_tops map (stackTops).
type fakeTops struct {
	m       map[uint32]uint64
	sets    int
	deletes int
	fail    bool // SetStackTop fails
	// The processes listed for stack switches (switch_tgids), and the
	// addresses of their Go code.
	switches map[uint32]bool
	texts    map[uint32][2]uint64
}

func (f *fakeTops) SetStackTop(tid uint32, top uint64) error {
	if f.fail {
		return errors.New("map full")
	}
	f.sets++
	f.m[tid] = top
	return nil
}

func (f *fakeTops) DeleteStackTop(tid uint32) error {
	f.deletes++
	delete(f.m, tid)
	return nil
}

func (f *fakeTops) SetStackSwitch(pid uint32, lo, hi uint64) error {
	if f.switches == nil {
		f.switches, f.texts = map[uint32]bool{}, map[uint32][2]uint64{}
	}
	f.switches[pid] = true
	f.texts[pid] = [2]uint64{lo, hi}
	return nil
}

func (f *fakeTops) DeleteStackSwitch(pid uint32) error {
	delete(f.switches, pid)
	return nil
}

func topsUserStacks() (*userStacks, *fakeTops) {
	f := &fakeTops{m: map[uint32]uint64{}}
	return &userStacks{tops: f, top: map[uint32]threadTop{}, tids: map[uint32][]uint32{}}, f
}

func topSample(pid, tid uint32, sp uint64, flags uint32) *attach.Sample {
	s := &attach.Sample{PID: pid, TID: tid, Flags: attach.FlagUserRegs | flags}
	s.Regs[unwind.RegRSP] = sp
	return s
}

// TestLearnTop: whole stacks raise a thread's top, cuts at the top
// delete it and, after maxTopCutsPerTID of them, no top is set again; a
// failed map update is retried; forget deletes a process's tops.
func TestLearnTop(t *testing.T) {
	us, f := topsUserStacks()
	want := func(step string, m map[uint32]uint64) {
		t.Helper()
		if !maps.Equal(f.m, m) {
			t.Fatalf("%s: sampler's tops %v, want %v", step, f.m, m)
		}
	}
	us.learnTop(topSample(10, 11, 0x7000, 0), unwind.StopComplete, 0x7100)
	want("whole stack", map[uint32]uint64{11: 0x7100})
	us.learnTop(topSample(10, 11, 0x6f00, 0), unwind.StopComplete, 0x7080)
	want("a lower top", map[uint32]uint64{11: 0x7100})
	if f.sets != 1 {
		t.Errorf("%d map updates for a top no higher, want 1", f.sets)
	}
	us.learnTop(topSample(10, 11, 0x7000, 0), unwind.StopComplete, 0x7200)
	want("a higher top", map[uint32]uint64{11: 0x7200})
	us.learnTop(topSample(10, 11, 0x7000, 0), unwind.StopComplete, 0)
	us.learnTop(topSample(10, 11, 0x7000, 0), unwind.StopWindow, 0)
	us.learnTop(topSample(10, 11, 0x7000, 0), unwind.StopNoCFI, 0)
	want("no extent, a cut not at the top", map[uint32]uint64{11: 0x7200})

	for cut := 1; cut <= maxTopCutsPerTID; cut++ {
		us.learnTop(topSample(10, 11, 0x7000, attach.FlagWindowTop), unwind.StopWindow, 0)
		want("cut at the top", map[uint32]uint64{})
		if us.topCuts != uint64(cut) {
			t.Fatalf("%d cuts counted, want %d", us.topCuts, cut)
		}
		us.learnTop(topSample(10, 11, 0x5000, 0), unwind.StopComplete, 0x5300)
		if cut < maxTopCutsPerTID {
			want("relearnt after a cut", map[uint32]uint64{11: 0x5300})
		} else {
			want("after the last cut", map[uint32]uint64{})
		}
	}

	f.fail = true
	us.learnTop(topSample(10, 12, 0x9000, 0), unwind.StopComplete, 0x9040)
	f.fail = false
	us.learnTop(topSample(10, 12, 0x9000, 0), unwind.StopComplete, 0x9040)
	us.learnTop(topSample(20, 21, 0xa000, 0), unwind.StopComplete, 0xa040)
	want("after a failed update", map[uint32]uint64{12: 0x9040, 21: 0xa040})
	us.learnTop(topSample(0, 0, 0xb000, 0), unwind.StopComplete, 0xb040)
	want("the idle task", map[uint32]uint64{12: 0x9040, 21: 0xa040})

	us.forget(10)
	want("pid 10 forgotten", map[uint32]uint64{21: 0xa040})
	if _, ok := us.top[11]; ok {
		t.Errorf("thread 11 (cut) still known after its process was forgotten")
	}
	us.learnTop(topSample(10, 11, 0x5000, 0), unwind.StopComplete, 0x5300)
	want("a reused tid", map[uint32]uint64{11: 0x5300, 21: 0xa040})
}

// TestLearnTopBound: the reader's copy of the tops stays within the
// sampler's size (maxTops), or maxStackTops, however many threads come.
func TestLearnTopBound(t *testing.T) {
	for _, capTops := range []int{0, 1024} { // 0: the sampler's size unknown
		us, _ := topsUserStacks()
		us.maxTops = capTops
		bound := maxStackTops
		if capTops > 0 {
			bound = capTops
		}
		for tid := uint32(1); tid <= maxStackTops+100; tid++ {
			us.learnTop(topSample(tid, tid, 0x7000, 0), unwind.StopComplete, 0x100)
			if len(us.top) > bound || len(us.tids) > bound {
				t.Fatalf("sampler's cap %d, after %d threads: %d tops, %d pids; want at most %d", capTops, tid, len(us.top), len(us.tids), bound)
			}
		}
		if len(us.top) == 0 {
			t.Errorf("sampler's cap %d: no tops kept", capTops)
		}
	}
}

// TestCodeProcessKeepsTable: a codeProcess hands the unwinder each
// object with its table once built, the same table on every later
// lookup; the reader's (CodeTry) reports a table not built as missing
// rather than build it, and takes it once another goroutine has.
func TestCodeProcessKeepsTable(t *testing.T) {
	sym, err := symbolize.New(symbolize.Options{KallsymsPath: os.DevNull})
	if err != nil {
		t.Fatal(err)
	}
	defer sym.Close()
	u := unwind.New(unwind.Options{})
	pid := uint32(os.Getpid())
	pc := uint64(reflect.ValueOf(TestCodeProcessKeepsTable).Pointer())

	reader := &codeProcess{sym: sym, u: u, pid: pid, how: symbolize.CodeTry}
	if _, ok := reader.Object(pc); ok || !reader.missing {
		t.Fatalf("reader: Object before any table was built: ok %v, missing %v; want false, true", ok, reader.missing)
	}
	worker := &codeProcess{sym: sym, u: u, pid: pid, how: symbolize.CodeRead}
	o, ok := worker.Object(pc)
	if !ok || o.Table == nil || !o.Table.HasCFI() {
		t.Fatalf("worker: Object = %+v, %v; want this binary with its table", o, ok)
	}
	reader.missing = false
	r1, ok1 := reader.Object(pc)
	r2, ok2 := reader.Object(pc + 1)
	if !ok1 || !ok2 || reader.missing || r1.Table != o.Table || r2.Table != o.Table {
		t.Errorf("reader after the build: tables %p, %p (ok %v, %v, missing %v); want the worker's %p twice",
			r1.Table, r2.Table, ok1, ok2, reader.missing, o.Table)
	}
	if len(reader.objs) != 1 {
		t.Errorf("reader holds %d objects for one mapping", len(reader.objs))
	}
}

// TestForgetSwitch: a process listed for stack switches is taken off the
// sampler's list when it is forgotten (it exec'd or exited), and the
// reader's verdicts on forgotten processes go (a new program is looked at
// again); a process not listed is left alone.
func TestForgetSwitch(t *testing.T) {
	us, f := topsUserStacks()
	us.sw = f
	f.SetStackSwitch(10, 0x400000, 0x500000)
	f.SetStackSwitch(20, 0x400000, 0x500000)
	us.switches = map[uint32]bool{10: true, 30: false}
	us.forget(10)
	us.forget(30)
	if f.switches[10] || !f.switches[20] || len(us.switches) != 0 {
		t.Errorf("after forget(10), forget(30): sampler's list %v, reader's verdicts %v; want only 20 in the sampler's, no verdicts", f.switches, us.switches)
	}
}

// TestListExec: a process that exec'd a Go program is listed for stack
// switches at once, with the addresses its program's executable mappings
// span in its maps; one that exec'd another program, whose maps show no
// executable mapping of its program, or that is gone, is not; the worker
// lists none at exec; a program is read once.
func TestListExec(t *testing.T) {
	root := t.TempDir()
	goBin, err := os.Executable() // this test binary: Go
	if err != nil {
		t.Fatal(err)
	}
	cBin := "/bin/sh" // Debian's dash: C
	inode := func(path string) uint64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	goMaps := fmt.Sprintf("00400000-00401000 r--p 00000000 08:01 %[1]d %[2]s\n"+
		"00401000-00500000 r-xp 00001000 08:01 %[1]d %[2]s\n"+
		"00500000-00600000 r--p 00100000 08:01 %[1]d %[2]s\n"+
		"7f0000000000-7f0000100000 r-xp 00000000 08:01 %[1]d0 /lib/other.so\n", inode(goBin), goBin)
	cMaps := fmt.Sprintf("55550000-55560000 r-xp 00000000 08:01 %d %s\n", inode(cBin), cBin)
	for pid, p := range map[string]struct{ exe, maps string }{
		"10": {goBin, goMaps}, "20": {cBin, cMaps}, "30": {goBin, goMaps}, "50": {goBin, cMaps},
	} {
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(p.exe, filepath.Join(root, pid, "exe")); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "maps"), []byte(p.maps), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	us, f := topsUserStacks()
	us.sw, us.procRoot = f, root
	for _, pid := range []uint32{10, 20, 40, 50} { // 40: no such process
		us.listExec(pid)
	}
	if want := map[uint32]bool{10: true}; !maps.Equal(f.switches, want) || !maps.Equal(us.switches, want) {
		t.Errorf("sampler's list %v, reader's verdicts %v; want %v in both", f.switches, us.switches, want)
	}
	if got, want := f.texts[10], [2]uint64{0x401000, 0x500000}; got != want {
		t.Errorf("process 10's Go code at %#x, want %#x", got, want)
	}
	if len(us.goExes) != 2 {
		t.Errorf("%d programs read, want 2 (the Go one and the C one)", len(us.goExes))
	}
	us.listExec(30) // the same Go program: from goExes
	if !f.switches[30] || len(us.goExes) != 2 {
		t.Errorf("process 30 (the same Go program) listed %v, %d programs read; want listed, 2", f.switches[30], len(us.goExes))
	}
	w, fw := topsUserStacks()
	w.sw, w.procRoot, w.worker = fw, root, true
	w.listExec(10)
	if len(fw.switches) != 0 {
		t.Errorf("the worker listed %v at exec, want none", fw.switches)
	}
}
