package unwind

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gprofile/gprofile/internal/testutil"
)

// readelfFDE is one FDE of `readelf --debug-dump=frames-interp`: its range
// and rows (loc → column → rule text such as "rsp+16", "c-8", "u", "exp").
type readelfFDE struct {
	cie        string
	start, end uint64
	rows       []readelfRow
}

type readelfRow struct {
	loc  uint64
	cols map[string]string
}

// readelfFrames runs readelf on path and returns, per section name
// (".eh_frame", ".debug_frame"), its FDEs, and the initial rows of its CIEs
// by offset.
func readelfFrames(t *testing.T, path string) (map[string][]readelfFDE, map[string]map[string]readelfRow) {
	t.Helper()
	readelf := testutil.RequireTool(t, "readelf")
	// readelf exits 1 after warnings about a separate debug file it
	// followed (".eh_frame has the NOBITS type"); its output is whole.
	out, err := exec.Command(readelf, "--debug-dump=frames-interp", "-W", path).Output()
	if err != nil && len(out) == 0 {
		t.Fatalf("readelf %s: %v", path, err)
	}
	fdes := map[string][]readelfFDE{}
	cies := map[string]map[string]readelfRow{}
	var sec string
	var cur *readelfFDE
	var cieOff string
	var header []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	flush := func() {
		if cur != nil {
			fdes[sec] = append(fdes[sec], *cur)
			cur = nil
		}
	}
	for sc.Scan() {
		line := sc.Text()
		f := readelfFields(line)
		switch {
		case strings.HasPrefix(line, "Contents of the "):
			flush()
			sec = strings.Fields(line)[3]
			cies[sec] = map[string]readelfRow{}
		case len(f) >= 4 && f[3] == "CIE":
			flush()
			cieOff = f[0]
			header = nil
		case len(f) >= 6 && f[3] == "FDE":
			flush()
			cieOff = ""
			rng := strings.TrimPrefix(f[5], "pc=")
			lo, hi, _ := strings.Cut(rng, "..")
			cur = &readelfFDE{cie: strings.TrimPrefix(f[4], "cie=")}
			cur.start, _ = strconv.ParseUint(lo, 16, 64)
			cur.end, _ = strconv.ParseUint(hi, 16, 64)
			header = nil
		case len(f) > 0 && f[0] == "LOC":
			header = f[1:]
		case len(f) == len(header)+1 && header != nil:
			loc, err := strconv.ParseUint(f[0], 16, 64)
			if err != nil {
				continue
			}
			row := readelfRow{loc: loc, cols: map[string]string{}}
			for i, h := range header {
				row.cols[h] = f[i+1]
			}
			if cur != nil {
				cur.rows = append(cur.rows, row)
			} else if cieOff != "" {
				cies[sec][cieOff] = row
			}
		}
	}
	flush()
	return fdes, cies
}

// readelfFields splits a line into fields, dropping the "(name)" readelf
// prints after a register number ("r9 (r9)" is one field, "r9").
func readelfFields(line string) []string {
	var out []string
	for _, f := range strings.Fields(line) {
		if strings.HasPrefix(f, "(") && strings.HasSuffix(f, ")") && len(out) > 0 {
			continue
		}
		out = append(out, f)
	}
	return out
}

var regNames = [numRegs]string{"rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip"}

// describe renders the rule in force at pc as readelf prints it: the CFA,
// ra and rbp columns.
func describe(tab *Table, pc uint64) (cfa, ra, rbp string, ok bool) {
	r, sub, ok := tab.lookup(pc)
	if !ok {
		return "", "", "", false
	}
	if r.cfaKind == cfaComplex {
		c := &sub.complex[r.cfaOff]
		if c.cfa.expr != nil {
			cfa = "exp"
		} else if c.cfa.reg < numRegs {
			cfa = fmt.Sprintf("%s%+d", regNames[c.cfa.reg], c.cfa.off)
		}
		return cfa, regRuleText(c.regs[RegRIP]), regRuleText(c.regs[RegRBP]), true
	}
	base := "rsp"
	if r.cfaKind == cfaRBP {
		base = "rbp"
	}
	cfa = fmt.Sprintf("%s%+d", base, r.cfaOff)
	ra = fmt.Sprintf("c%+d", r.raOff)
	if r.raKind == raUndef {
		ra = "u"
	}
	switch r.rbpKind {
	case rbpOffset:
		rbp = fmt.Sprintf("c%+d", r.rbpOff)
	case rbpSame:
		rbp = "s|u"
	default:
		rbp = "u"
	}
	return cfa, ra, rbp, true
}

func regRuleText(r regRule) string {
	switch r.kind {
	case rUnset:
		return "s|u"
	case rUndefined:
		return "u"
	case rSame:
		return "s"
	case rOffset:
		return fmt.Sprintf("c%+d", r.off)
	case rValOffset:
		return fmt.Sprintf("v%+d", r.off)
	case rRegister:
		return fmt.Sprintf("r%d", r.reg)
	case rExpr:
		return "exp"
	}
	return "vexp"
}

func matchRule(want, got string) bool {
	if got == "s|u" {
		return want == "s" || want == "u"
	}
	return want == got
}

// sectionTable builds a table from one section of an ELF file only.
func sectionTable(t *testing.T, path, name string) *Table {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := f.Section(name)
	if s == nil {
		t.Fatalf("%s has no %s", path, name)
	}
	data, err := sectionData(s)
	if err != nil {
		t.Fatal(err)
	}
	fs := &frameSection{data: data, eh: name == ".eh_frame"}
	if fs.eh {
		fs.addr = s.Addr
	}
	b := newTableBuilder()
	b.addSection(fs, 0, nil)
	tab, err := b.finish()
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// compareReadelf checks the table of one section of path against readelf,
// row by row, in both directions: the rule at each readelf row, and the
// readelf row in force at each of the table's row starts. It returns the
// number of rows compared.
func compareReadelf(t *testing.T, path, section string) int {
	t.Helper()
	all, cies := readelfFrames(t, path)
	fdes := all[section]
	if len(fdes) == 0 {
		t.Fatalf("readelf shows no FDE in %s of %s", section, path)
	}
	tab := sectionTable(t, path, section)
	if s := tab.Stats(); s.BadFDEs != 0 || s.BadCIEs != 0 {
		t.Errorf("%s %s: %d bad FDEs, %d bad CIEs: %v", path, section, s.BadFDEs, s.BadCIEs, s.Err)
	}
	compared, errs := 0, 0
	check := func(fd *readelfFDE, pc uint64, want readelfRow) {
		compared++
		cfa, ra, rbp, ok := describe(tab, pc)
		wantRBP := want.cols["rbp"]
		if wantRBP == "" {
			wantRBP = "u"
		}
		if !ok || cfa != want.cols["CFA"] || ra != want.cols["ra"] || !matchRule(wantRBP, rbp) {
			errs++
			if errs <= 20 {
				t.Errorf("%s FDE %#x..%#x at %#x: got CFA %s ra %s rbp %s (found %v), readelf says CFA %s ra %s rbp %s",
					section, fd.start, fd.end, pc, cfa, ra, rbp, ok, want.cols["CFA"], want.cols["ra"], wantRBP)
			}
		}
	}
	for i := range fdes {
		fd := &fdes[i]
		if fd.start == 0 || fd.start == fd.end {
			continue
		}
		rows := fd.rows
		if len(rows) == 0 {
			cr, ok := cies[section][fd.cie]
			if !ok {
				continue
			}
			rows = []readelfRow{{loc: fd.start, cols: cr.cols}}
		}
		for _, row := range rows {
			if row.loc < fd.end {
				check(fd, row.loc, row)
			}
		}
		// The other direction: every row start of ours inside the FDE.
		first := sort.Search(len(tab.pcs), func(j int) bool { return tab.base+uint64(tab.pcs[j]) > fd.start })
		for j := first; j < len(tab.pcs); j++ {
			pc := tab.base + uint64(tab.pcs[j])
			if pc >= fd.end {
				break
			}
			k := sort.Search(len(rows), func(k int) bool { return rows[k].loc > pc }) - 1
			if k >= 0 {
				check(fd, pc, rows[k])
			}
		}
	}
	if errs > 0 {
		t.Errorf("%s %s: %d of %d rows differ from readelf", path, section, errs, compared)
	}
	return compared
}

func TestLibcAgainstReadelf(t *testing.T) {
	const libc = "/lib/x86_64-linux-gnu/libc.so.6"
	n := compareReadelf(t, libc, ".eh_frame")
	t.Logf("%s: %d rows compared", libc, n)
	if n < 10000 {
		t.Errorf("only %d rows compared; Debian's libc has about 24k", n)
	}
}
