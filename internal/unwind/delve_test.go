package unwind

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"sort"
	"testing"

	dlvframe "github.com/go-delve/delve/pkg/dwarf/frame"
	"github.com/gprofile/gprofile/internal/testutil"
)

// compareDelve checks one CFI section of path against delve's
// pkg/dwarf/frame (a test-only oracle; it panics on bad input, so it only
// sees the well-formed binaries of these tests): the same FDE ranges, and
// at each FDE start and each of our row starts, the same CFA rule, return
// address rule and rbp rule. It returns the number of pcs compared.
func compareDelve(t *testing.T, path, section string) int {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := f.Section(section)
	if s == nil {
		t.Fatalf("%s has no %s", path, section)
	}
	data, err := sectionData(s)
	if err != nil {
		t.Fatal(err)
	}
	var ehAddr uint64
	if section == ".eh_frame" {
		ehAddr = s.Addr
	}
	fdes, err := dlvframe.Parse(data, binary.LittleEndian, 0, 8, ehAddr)
	if err != nil {
		t.Fatalf("delve parses %s of %s: %v", section, path, err)
	}
	tab := sectionTable(t, path, section)
	compared, errs := 0, 0
	for _, fde := range fdes {
		if fde.Begin() == 0 || fde.End() == fde.Begin() {
			continue
		}
		pcs := []uint64{fde.Begin()}
		first := sort.Search(len(tab.pcs), func(j int) bool { return tab.base+uint64(tab.pcs[j]) > fde.Begin() })
		for j := first; j < len(tab.pcs) && tab.base+uint64(tab.pcs[j]) < fde.End(); j++ {
			pcs = append(pcs, tab.base+uint64(tab.pcs[j]))
		}
		for _, pc := range pcs {
			compared++
			want, err := delveRule(fde, pc)
			if err != nil {
				t.Fatalf("delve at %#x: %v", pc, err)
			}
			cfa, ra, rbp, ok := describe(tab, pc)
			got := fmt.Sprintf("%s ra %s rbp %s", cfa, ra, rbp)
			if !ok || !delveMatch(want, cfa, ra, rbp) {
				errs++
				if errs <= 20 {
					t.Errorf("%s FDE %#x..%#x at %#x: got %s (found %v), delve says %s", section, fde.Begin(), fde.End(), pc, got, ok, want)
				}
			}
		}
	}
	if errs > 0 {
		t.Errorf("%s %s: %d of %d pcs differ from delve", path, section, errs, compared)
	}
	return compared
}

// delveRules is delve's answer at one pc, in describe's words.
type delveRules struct{ cfa, ra, rbp string }

func (d delveRules) String() string { return fmt.Sprintf("%s ra %s rbp %s", d.cfa, d.ra, d.rbp) }

func delveRule(fde *dlvframe.FrameDescriptionEntry, pc uint64) (d delveRules, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	fc, err := fde.EstablishFrame(pc)
	if err != nil {
		return d, err
	}
	switch fc.CFA.Rule {
	case dlvframe.RuleCFA:
		d.cfa = fmt.Sprintf("%s%+d", regNames[fc.CFA.Reg], fc.CFA.Offset)
	case dlvframe.RuleExpression:
		d.cfa = "exp"
	default:
		d.cfa = fmt.Sprintf("rule%d", fc.CFA.Rule)
	}
	text := func(r dlvframe.DWRule, ok bool) string {
		if !ok {
			return "s|u"
		}
		switch r.Rule {
		case dlvframe.RuleUndefined:
			return "u"
		case dlvframe.RuleSameVal:
			return "s"
		case dlvframe.RuleOffset:
			return fmt.Sprintf("c%+d", r.Offset)
		case dlvframe.RuleValOffset:
			return fmt.Sprintf("v%+d", r.Offset)
		case dlvframe.RuleRegister:
			return fmt.Sprintf("r%d", r.Reg)
		case dlvframe.RuleExpression:
			return "exp"
		case dlvframe.RuleValExpression:
			return "vexp"
		}
		return fmt.Sprintf("rule%d", r.Rule)
	}
	ra, ok := fc.Regs[fc.RetAddrReg]
	d.ra = text(ra, ok)
	bp, ok := fc.Regs[RegRBP]
	d.rbp = text(bp, ok)
	return d, nil
}

// delveMatch compares delve's rules with ours; "s|u" (not mentioned, or
// same value) matches either word on both sides.
func delveMatch(d delveRules, cfa, ra, rbp string) bool {
	eq := func(a, b string) bool {
		if a == "s|u" || b == "s|u" {
			return a == b || a == "s" || b == "s" || a == "u" || b == "u"
		}
		return a == b
	}
	return d.cfa == cfa && eq(d.ra, ra) && eq(d.rbp, rbp)
}

// TestAgainstDelve compares libc's .eh_frame, a C test binary's and a Go
// binary's .debug_frame with delve's CFI reader.
func TestAgainstDelve(t *testing.T) {
	t.Run("libc", func(t *testing.T) {
		t.Logf("%d pcs compared", compareDelve(t, "/lib/x86_64-linux-gnu/libc.so.6", ".eh_frame"))
	})
	t.Run("c", func(t *testing.T) {
		bin := testutil.BuildC(t, "testdata/stackdump.c", "-O2", "-fomit-frame-pointer", "-pthread")
		t.Logf("%d pcs compared", compareDelve(t, bin, ".eh_frame"))
	})
	t.Run("go", func(t *testing.T) {
		bin := buildGoChain(t)
		t.Logf("%d pcs compared", compareDelve(t, bin, ".debug_frame"))
	})
}
