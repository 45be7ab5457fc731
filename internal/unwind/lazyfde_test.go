package unwind

import (
	"debug/elf"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/gprofile/gprofile/internal/testutil"
)

// lazyTestBinaries are system binaries whose .eh_frame the lazy table
// is checked against the whole one with; those missing are skipped.
var lazyTestBinaries = []string{
	"/lib/x86_64-linux-gnu/libc.so.6",
	"/lib64/ld-linux-x86-64.so.2",
	"/lib/x86_64-linux-gnu/libstdc++.so.6",
	"/lib/x86_64-linux-gnu/libm.so.6",
	"/lib/x86_64-linux-gnu/libgcc_s.so.1",
}

// TestLazyFDEsMatchWhole: a table that builds its FDEs on demand
// (through .eh_frame_hdr) gives, at the first, second, middle and last
// byte of every FDE and one past its end, the same rule as the table of
// every FDE built at once (complex rules compared by content); a lookup
// builds only the FDE it lands in.
func TestLazyFDEsMatchWhole(t *testing.T) {
	bins := []string{testutil.BuildC(t, "testdata/stackdump.c", "-O2", "-fomit-frame-pointer", "-pthread")}
	for _, p := range lazyTestBinaries {
		if _, err := os.Stat(p); err == nil {
			bins = append(bins, p)
		}
	}
	for _, p := range bins {
		f, err := elf.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		whole, err := newTable(f, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		lazy, err := newTable(f, nil, true)
		if err != nil {
			t.Fatal(err)
		}
		// As the unwinder loads it: .eh_frame mapped, not read.
		mapped, err := loadTable(p, "")
		if err != nil {
			t.Fatal(err)
		}
		if mapped.fdes == nil || mapped.fdes.mapped == nil {
			t.Fatalf("%s: loadTable's table is lazy %v, mapped %v; want both", p, mapped.fdes != nil, mapped.fdes != nil && mapped.fdes.mapped != nil)
		}
		eh, hdr := f.Section(".eh_frame"), f.Section(".eh_frame_hdr")
		hb, _ := sectionData(hdr)
		data, _ := sectionData(eh)
		f.Close()
		if lazy.fdes == nil {
			t.Errorf("%s: the table was built whole; want its FDEs on demand", p)
			continue
		}
		if whole.fdes != nil || lazy.Rows() != 0 {
			t.Fatalf("%s: whole table lazy %v, lazy table built %d rows before any lookup", p, whole.fdes != nil, lazy.Rows())
		}
		starts, offs := ehFrameHdrTable(hb, hdr.Addr, eh.Addr, uint64(len(data)))
		if len(starts) < 10 || len(starts) != lazy.stats.FDEs {
			t.Fatalf("%s: .eh_frame_hdr lists %d FDEs, the table %d", p, len(starts), lazy.stats.FDEs)
		}
		lazy.lookup(starts[len(starts)/2])
		if n := lazy.Rows(); n == 0 || n > 64 {
			t.Errorf("%s: one lookup built %d rows; want one FDE's", p, n)
		}
		var checked int
		for i, start := range starts {
			end := start + 1
			if i+1 < len(starts) {
				end = starts[i+1]
			}
			for _, pc := range []uint64{start, start + 1, start + (end-start)/2, end - 1, end} {
				want, wt, wok := whole.lookup(pc)
				got, gt, gok := lazy.lookup(pc)
				if wok != gok || (wok && !sameRule(want, wt, got, gt)) {
					t.Fatalf("%s: rule at %#x (FDE %d at .eh_frame+%#x): lazy %+v (%v), whole %+v (%v)", p, pc, i, offs[i], got, gok, want, wok)
				}
				if got, gt, gok := mapped.lookup(pc); wok != gok || (wok && !sameRule(want, wt, got, gt)) {
					t.Fatalf("%s: rule at %#x (FDE %d at .eh_frame+%#x): mapped %+v (%v), whole %+v (%v)", p, pc, i, offs[i], got, gok, want, wok)
				}
				checked++
			}
		}
		t.Logf("%s: %d FDEs, %d addresses, %d rows built", p, len(starts), checked, lazy.Rows())
	}
}

// TestLazyFDEsMappedTruncated: loadTable reads .eh_frame from a mapping
// of the file; once the file is cut short before it, an FDE not built
// yet gets no rule instead of killing the process (SIGBUS), and one
// built before keeps its rows, which hold nothing of the mapping (an
// expression rule's bytes are copied: the PLT's CFA expression).
func TestLazyFDEsMappedTruncated(t *testing.T) {
	bin := copyToTemp(t, testutil.BuildC(t, "testdata/stackdump.c", "-O2", "-fomit-frame-pointer", "-pthread"))
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	eh, hdr, plt := f.Section(".eh_frame"), f.Section(".eh_frame_hdr"), f.Section(".plt")
	hb, _ := sectionData(hdr)
	f.Close()
	if plt == nil {
		t.Fatal("no .plt: the expression rule this test checks is missing")
	}
	starts, _ := ehFrameHdrTable(hb, hdr.Addr, eh.Addr, eh.Size)
	tab, err := loadTable(bin, "")
	if err != nil || tab.fdes == nil || tab.fdes.mapped == nil {
		t.Fatalf("loadTable: %v (lazy and mapped: %v)", err, tab != nil && tab.fdes != nil && tab.fdes.mapped != nil)
	}
	// Built before the cut: the PLT's rule (a CFA expression) and the
	// last FDE's.
	pltPC, last := plt.Addr+plt.Size/2, starts[len(starts)-1]
	pltRule, pltTab, ok := tab.lookup(pltPC)
	if !ok || pltRule.cfaKind != cfaComplex || pltTab.complex[pltRule.cfaOff].cfa.expr == nil {
		t.Fatalf("rule at .plt+%#x = %+v (%v); want a CFA expression", plt.Size/2, pltRule, ok)
	}
	want, _, wok := tab.lookup(last)
	if !wok {
		t.Fatalf("no rule at the last FDE's start %#x", last)
	}
	if err := os.Truncate(bin, int64(eh.Offset)&^4095); err != nil {
		t.Fatal(err)
	}
	var lost int
	for _, pc := range starts[:len(starts)-1] {
		if pc < plt.Addr || pc >= plt.Addr+plt.Size {
			if r, _, ok := tab.lookup(pc); ok {
				t.Errorf("after truncation, lookup(%#x) = %+v, want no rule", pc, r)
			}
			lost++
		}
	}
	if lost == 0 {
		t.Fatal("no FDE left to look up after the cut")
	}
	if got, _, ok := tab.lookup(last); !ok || got != want {
		t.Errorf("after truncation, the FDE built before: %+v (%v), want %+v", got, ok, want)
	}
	got, gotTab, ok := tab.lookup(pltPC)
	if !ok || !sameRule(pltRule, pltTab, got, gotTab) {
		t.Errorf("after truncation, the PLT's rule: %+v (%v), want %+v", got, ok, pltRule)
	}
	// Its expression still evaluates: its bytes are not the mapping's.
	if e := gotTab.complex[got.cfaOff].cfa.expr; len(e) == 0 || e[0] == 0 {
		t.Errorf("the PLT's CFA expression after truncation: % x", e)
	}
}

// copyToTemp copies the binary src into a directory of the test's and
// returns the copy's path: a file the test may cut short.
func copyToTemp(t *testing.T, src string) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// sameRule reports whether rule a of table at and rule b of table bt
// say the same, complex rules by content.
func sameRule(a rule, at *Table, b rule, bt *Table) bool {
	if a.cfaKind != cfaComplex || b.cfaKind != cfaComplex {
		return a == b
	}
	return reflect.DeepEqual(at.complex[a.cfaOff], bt.complex[b.cfaOff])
}

// BenchmarkLoadTable reads libc's unwind table as the unwinder does
// (loadTable): every FDE built at once (whole), or on demand (lazy)
// with the FDEs of 300 functions then looked up, about what a profile
// touches; mapped is lazy with .eh_frame mapped, not read (loadTable
// itself). Reports the table's bytes as the cache counts them.
func BenchmarkLoadTable(b *testing.B) {
	const path = "/lib/x86_64-linux-gnu/libc.so.6"
	f, err := elf.Open(path)
	if err != nil {
		testutil.Skipf(b, "%v", err)
	}
	eh, hdr := f.Section(".eh_frame"), f.Section(".eh_frame_hdr")
	hb, _ := sectionData(hdr)
	data, _ := sectionData(eh)
	starts, _ := ehFrameHdrTable(hb, hdr.Addr, eh.Addr, uint64(len(data)))
	f.Close()
	for _, name := range []string{"whole", "lazy", "mapped"} {
		b.Run(name, func(b *testing.B) {
			var tab *Table
			for b.Loop() {
				if name == "mapped" {
					if tab, err = loadTable(path, ""); err != nil || tab.fdes == nil || tab.fdes.mapped == nil {
						b.Fatalf("loadTable: %v (not lazy and mapped)", err)
					}
				} else {
					f, err := elf.Open(path)
					if err != nil {
						b.Fatal(err)
					}
					if tab, err = newTable(f, nil, name == "lazy"); err != nil {
						b.Fatal(err)
					}
					f.Close()
				}
				for i := 0; i < len(starts); i += len(starts) / 300 {
					tab.lookup(starts[i] + 1)
				}
			}
			b.ReportMetric(float64(tab.Bytes()), "table-bytes")
		})
	}
}

// BenchmarkUnwindMemo looks up the rules of 300 functions' pcs of
// libc's lazily built table, as an unwind of stacks seen before does:
// through the Unwinder's rule memo ("memo") and in the table itself
// ("table"), the FDEs built already. ns/op is per lookup.
func BenchmarkUnwindMemo(b *testing.B) {
	const path = "/lib/x86_64-linux-gnu/libc.so.6"
	f, err := elf.Open(path)
	if err != nil {
		testutil.Skipf(b, "%v", err)
	}
	defer f.Close()
	eh, hdr := f.Section(".eh_frame"), f.Section(".eh_frame_hdr")
	hb, _ := sectionData(hdr)
	data, _ := sectionData(eh)
	starts, _ := ehFrameHdrTable(hb, hdr.Addr, eh.Addr, uint64(len(data)))
	tab, err := newTable(f, nil, true)
	if err != nil {
		b.Fatal(err)
	}
	var pcs []uint64
	for i := 0; i < len(starts); i += len(starts) / 300 {
		if _, _, ok := tab.lookup(starts[i] + 1); ok {
			pcs = append(pcs, starts[i]+1)
		}
	}
	memo := newRuleMemo(ruleMemoBits)
	for name, lookup := range map[string]func(uint64) (rule, *Table, bool){
		"memo":  func(pc uint64) (rule, *Table, bool) { return memo.lookup(tab, pc) },
		"table": tab.lookup,
	} {
		b.Run(name, func(b *testing.B) {
			n := 0
			for b.Loop() {
				if _, _, ok := lookup(pcs[n%len(pcs)]); !ok {
					b.Fatalf("no rule for %#x", pcs[n%len(pcs)])
				}
				n++
			}
		})
	}
}

// twoLibcTables returns libc's unwind table twice: as read, and with a
// different rule at every pc (each return address offset moved), so
// that a memo entry of one answering for the other shows.
func twoLibcTables(t *testing.T) (a, b *Table) {
	t.Helper()
	f, err := elf.Open("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		testutil.Skipf(t, "%v", err)
	}
	defer f.Close()
	if a, err = newTable(f, nil, false); err != nil {
		t.Fatal(err)
	}
	if b, err = newTable(f, nil, false); err != nil {
		t.Fatal(err)
	}
	b.rules = slices.Clone(b.rules)
	for i := range b.rules {
		b.rules[i].raOff++
	}
	return a, b
}

// TestRuleMemoMatchesTable looks up pcs of two tables through one rule
// memo, in rounds so that the second finds them remembered (or evicted
// by another pc of the same slot), and requires the rule of the table
// itself every time. The tables share pcs: libc's and the same file
// with a rule changed, so that an entry of one table answering for the
// other shows.
func TestRuleMemoMatchesTable(t *testing.T) {
	a, b := twoLibcTables(t)
	memo := newRuleMemo(ruleMemoBits)
	span := uint64(a.pcs[len(a.pcs)-1])
	hits := 0
	for round := range 3 {
		rng := rand.New(rand.NewPCG(1, 2)) // the same pcs every round
		for range 20000 {
			pc := a.base + rng.Uint64N(span)
			for _, tab := range []*Table{a, b} {
				if e := memo.slot(tab.memoID(), pc); e.pc == pc && e.tab == tab.memoID() {
					hits++
				}
				want, _, wok := tab.lookup(pc)
				got, _, gok := memo.lookup(tab, pc)
				if got != want || gok != wok {
					t.Fatalf("round %d: memo gives %+v, %v for %#x; the table %+v, %v", round, got, gok, pc, want, wok)
				}
			}
		}
	}
	if hits == 0 {
		t.Error("no lookup was answered from the memo")
	}
	// pcs whose entries of a and b share a slot: b's lookup finds a's
	// entry for the same pc there, and must not take it.
	shared := 0
	for pc := a.base; pc < a.base+span && shared < 50; pc++ {
		if memo.slot(a.memoID(), pc) != memo.slot(b.memoID(), pc) {
			continue
		}
		want, _, wok := b.lookup(pc)
		if _, _, ok := memo.lookup(a, pc); !ok || !wok {
			continue
		}
		shared++
		if got, _, _ := memo.lookup(b, pc); got != want {
			t.Fatalf("%#x: b's lookup gives %+v (a's entry in the shared slot?), want %+v", pc, got, want)
		}
	}
	if shared == 0 {
		t.Fatal("no pc of a and b shares a slot: the check above checked nothing")
	}
}

// TestSiblingsConcurrent unwinds the qsort24 stack from four goroutines
// at once, with an Unwinder and three of its Siblings (shared tables,
// a rule memo each), and requires the stack the Unwinder gives alone
// every time. Run under -race it checks that Siblings share nothing
// unsynchronized.
func TestSiblingsConcurrent(t *testing.T) {
	u, d := qsort24(t)
	want, stop := u.Unwind(nil, d, &d.regs, d.stack)
	if stop != StopComplete {
		t.Fatalf("qsort24 stops with %v", stop)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for g := range 4 {
		w := u
		if g > 0 {
			w = u.Sibling(0)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var dst []uint64
			for range 2000 {
				var stop Stop
				if dst, stop = w.Unwind(dst[:0], d, &d.regs, d.stack); stop != StopComplete || !slices.Equal(dst, want) {
					errs <- fmt.Sprintf("goroutine %d: %d frames, stop %v; want %d, complete", g, len(dst), stop, len(want))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if st := u.Sibling(0).Stats(); st.Tables == 0 || st != u.Stats() {
		t.Errorf("a Sibling's Stats %+v, the Unwinder's %+v: want the same tables", st, u.Stats())
	}
}

// TestSiblingMemoSize: a Sibling's rule memo has the slots asked for, or
// the default's when none are, and shares the tables.
func TestSiblingMemoSize(t *testing.T) {
	u := New(Options{})
	for _, c := range []struct{ bits, want int }{{0, 1 << ruleMemoBits}, {11, 2048}, {1, 2}} {
		s := u.Sibling(c.bits)
		if n := len(s.memo.slots); n != c.want {
			t.Errorf("Sibling(%d): %d memo slots, want %d", c.bits, n, c.want)
		}
		if s.cache != u.cache || s.memo == u.memo {
			t.Errorf("Sibling(%d) shares the memo or not the tables", c.bits)
		}
	}
	if n := len(u.memo.slots); n != 1<<ruleMemoBits {
		t.Errorf("New: %d memo slots, want %d", n, 1<<ruleMemoBits)
	}
}
