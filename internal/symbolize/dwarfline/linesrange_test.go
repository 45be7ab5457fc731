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
			mean := float64(width) / float64(len(pcs))
			t.Logf("%d pcs, %d addresses checked, mean range %.1f bytes", len(pcs), checked, mean)
			if mean < 2 {
				t.Errorf("mean range %.1f bytes: LinesRange gives single addresses", mean)
			}
		})
	}
}
