package dwarfline

import (
	"slices"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
)

// TestLinesRangeHoldsAnswer checks LinesRange on libc's debug file (DWARF
// 5, deep inlining) and on the inlining workload built by gcc: every
// address of the range it gives around a pc, looked up in a table of its
// own, gets pc's answer, and the ranges span many addresses on average
// (else a memo of ranges would save nothing over one of addresses).
func TestLinesRangeHoldsAnswer(t *testing.T) {
	_, libc := symtest.LibcDebugFile(t)
	for _, path := range []string{libc, symtest.BuildInline(t)} {
		t.Run(path, func(t *testing.T) {
			f, lr := symtest.OpenELFFile(t, path)
			d := Load(f, lr, nil)
			if d == nil {
				t.Fatalf("no DWARF in %s", path)
			}
			x, check := NewTable(d), NewTable(d)
			x.Lines(0) // builds the index
			var pcs []uint64
			for _, r := range x.ranges {
				for pc := r.lo; pc < r.hi; pc += max(1, (r.hi-r.lo)/40) {
					pcs = append(pcs, pc)
				}
			}
			if len(pcs) > 20000 {
				pcs = pcs[:20000]
			}
			var width, checked uint64
			for _, pc := range pcs {
				want, lo, hi := x.LinesRange(pc)
				if lo > pc || hi <= pc {
					t.Fatalf("LinesRange(%#x): range [%#x, %#x) does not hold it", pc, lo, hi)
				}
				width += hi - lo
				for _, q := range []uint64{lo, lo + (hi-lo)/2, hi - 1} {
					checked++
					if got := check.Lines(q); !slices.Equal(got, want) {
						t.Fatalf("LinesRange(%#x) = %v on [%#x, %#x), but Lines(%#x) = %v", pc, want, lo, hi, q, got)
					}
				}
			}
			// Addresses no unit holds: below the first range, between
			// ranges, above the last. Their range holds no unit's
			// address either.
			gaps := []uint64{0, x.ranges[len(x.ranges)-1].hi + 4096}
			for i := 1; i < len(x.ranges) && len(gaps) < 2000; i++ {
				if prev, r := x.ranges[i-1], x.ranges[i]; prev.hi < r.lo {
					gaps = append(gaps, prev.hi+(r.lo-prev.hi)/2)
				}
			}
			wide := 0
			for _, pc := range gaps {
				ls, lo, hi := x.LinesRange(pc)
				if lo > pc || hi <= pc {
					t.Fatalf("LinesRange(%#x): range [%#x, %#x) does not hold it", pc, lo, hi)
				}
				if len(ls) != 0 {
					t.Fatalf("LinesRange(%#x) = %v, want no lines: no unit holds it", pc, ls)
				}
				if hi-lo > 1 {
					wide++
				}
				for _, q := range []uint64{lo, lo + (hi-lo)/2, hi - 1} {
					if got := check.Lines(q); len(got) != 0 {
						t.Fatalf("LinesRange(%#x) = no lines on [%#x, %#x), but Lines(%#x) = %v", pc, lo, hi, q, got)
					}
				}
			}
			t.Logf("%d addresses outside every unit, %d of them answered for a range", len(gaps), wide)
			if wide < len(gaps)/2 {
				t.Errorf("%d of %d addresses outside every unit answered for more than themselves", wide, len(gaps))
			}
			mean := float64(width) / float64(len(pcs))
			t.Logf("%d pcs, %d addresses checked, mean range %.1f bytes", len(pcs), checked, mean)
			if mean < 2 {
				t.Errorf("mean range %.1f bytes: LinesRange gives single addresses", mean)
			}
		})
	}
}
