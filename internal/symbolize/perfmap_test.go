package symbolize

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParsePerfMap(t *testing.T) {
	text := "7f0000001000 40 LazyCompile:*hot /tmp/hot.js:3\n" +
		"0x7f0000002000 0x10 Builtin: ArgumentsAdaptorTrampoline\r\n" +
		"\n" +
		"7f0000003000 0 zero size\n" +
		"7f0000004000 10\n" +
		"zz 10 not hex\n" +
		"ffffffffffffff00 200 wraps around\n" +
		"7f0000005000\t20\tJS:~tab separated\n" +
		"7f0000006000 20 " + strings.Repeat("x", maxPerfMapLine) + "\n" +
		"12345678901234567 10 too many digits\n" +
		"7f0000007000 8 last line, no newline"
	syms, skipped := ParsePerfMap([]byte(text))
	want := []PerfMapSymbol{
		{0x7f0000001000, 0x40, "LazyCompile:*hot /tmp/hot.js:3"},
		{0x7f0000002000, 0x10, "Builtin: ArgumentsAdaptorTrampoline"},
		{0x7f0000005000, 0x20, "JS:~tab separated"},
		{0x7f0000007000, 0x8, "last line, no newline"},
	}
	if !reflect.DeepEqual(syms, want) {
		t.Errorf("ParsePerfMap = %+v\nwant %+v", syms, want)
	}
	if skipped != 6 {
		t.Errorf("skipped %d lines, want 6", skipped)
	}
}

func TestPerfMapOverlap(t *testing.T) {
	pm := &perfMap{}
	pm.add([]PerfMapSymbol{
		{0x1000, 0x100, "old"},
		{0x1040, 0x20, "new inside"},
		{0x1080, 0x100, "newer overlapping"},
		{0x2000, 0x10, "apart"},
	})
	for _, tt := range []struct {
		addr uint64
		want string
	}{
		{0xfff, ""}, {0x1000, "old"}, {0x103f, "old"}, {0x1040, "new inside"}, {0x105f, "new inside"},
		{0x1060, "old"}, {0x107f, "old"}, {0x1080, "newer overlapping"}, {0x117f, "newer overlapping"},
		{0x1180, ""}, {0x2000, "apart"}, {0x2010, ""},
	} {
		got := ""
		if sym := pm.lookup(tt.addr); sym != nil {
			got = sym.Name
		}
		if got != tt.want {
			t.Errorf("lookup(%#x) = %q, want %q", tt.addr, got, tt.want)
		}
	}
	// A later line for the same code replaces the old name.
	pm.add([]PerfMapSymbol{{0x1000, 0x200, "recompiled"}})
	if sym := pm.lookup(0x1050); sym == nil || sym.Name != "recompiled" {
		t.Errorf("after recompilation lookup = %+v", sym)
	}
}

// writePerfMap writes (append false) or appends lines to the perf map
// at /tmp/perf-<name>.map inside root.
func writePerfMap(t *testing.T, root string, name uint32, appendTo bool, lines ...string) {
	t.Helper()
	dir := filepath.Join(root, "tmp")
	os.MkdirAll(dir, 0o755)
	flag := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if appendTo {
		flag = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("perf-%d.map", name)), flag, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		f.WriteString(l + "\n")
	}
	f.Close()
}

func TestStackPerfMap(t *testing.T) {
	const pid = 90
	jit := MapsEntry{Start: 0x7f0000000000, Limit: 0x7f0000100000, Perms: "rwxp"}
	named := MapsEntry{Start: 0x7f0000200000, Limit: 0x7f0000300000, Perms: "r-xp", Path: "[anon:v8 code]"}
	fp := newFakeProc(t)
	fp.setMaps(pid, jit, named)
	root := fp.fakeRoot(pid)
	writePerfMap(t, root, pid, false,
		"7f0000001000 100 LazyCompile:*hot /tmp/hot.js:3",
		"7f0000200000 40 _ZN2ns7mangledEi",
		"7f0000800000 10 outside every mapping",
		"garbage line",
		strings.Repeat("y", 10<<20))
	s := fp.symbolizer("testdata/kallsyms.txt")
	now := time.Unix(1000, 0)
	s.now = func() time.Time { return now }
	ips := []uint64{0x7f0000001010, 0x7f0000200011, 0x7f0000800001, 0x7f0000002001}
	st := s.Stack(pid, nil, ips)
	checkFrames(t, st.Frames, []wantFrame{
		{"LazyCompile:*hot /tmp/hot.js:3", ReasonNone, ""},
		{"ns::mangled(int)", ReasonNone, "[anon:v8 code]"},
		{"outside every mapping", ReasonNone, fmt.Sprintf("[perf-%d.map]", pid)},
		{"", ReasonNoSymbol, ""},
	})
	if f := st.Frames[0]; f.SymbolStart != 0x7f0000001000 || f.SystemName != f.Function {
		t.Errorf("frame 0 = %+v", f)
	}
	if n := s.Stats().PerfMapLinesSkipped; n != 2 {
		t.Errorf("PerfMapLinesSkipped = %d, want 2", n)
	}

	// The JIT appends: the new code is named once the map is read again,
	// at most every perfMapCheckInterval.
	writePerfMap(t, root, pid, true, "7f0000002000 80 LazyCompile:*later /tmp/hot.js:9")
	now = now.Add(perfMapCheckInterval / 2)
	checkFrames(t, s.Stack(pid, nil, ips[3:]).Frames, []wantFrame{{"", ReasonNoSymbol, ""}})
	now = now.Add(perfMapCheckInterval)
	checkFrames(t, s.Stack(pid, nil, ips[3:]).Frames, []wantFrame{{"LazyCompile:*later /tmp/hot.js:9", ReasonNone, ""}})
}

// TestStackPerfMapNSpid: a process in a PID namespace writes its perf map
// under the PID it has there, the last NSpid value of its status.
func TestStackPerfMapNSpid(t *testing.T) {
	const pid, nspid = 4242, 7
	jit := MapsEntry{Start: 0x7f0000000000, Limit: 0x7f0000100000, Perms: "r-xp"}
	fp := newFakeProc(t)
	fp.setMaps(pid, jit)
	root := fp.fakeRoot(pid)
	status := fmt.Sprintf("Name:\tnode\nTgid:\t%d\nNSpid:\t%d\t%d\n", pid, pid, nspid)
	if err := os.WriteFile(filepath.Join(fp.root, fmt.Sprint(pid), "status"), []byte(status), 0o644); err != nil {
		t.Fatal(err)
	}
	writePerfMap(t, root, nspid, false, "7f0000000100 100 JS:*inContainer")
	s := fp.symbolizer("testdata/kallsyms.txt")
	checkFrames(t, s.Stack(pid, nil, []uint64{0x7f0000000180}).Frames, []wantFrame{{"JS:*inContainer", ReasonNone, ""}})
}

func FuzzParsePerfMap(f *testing.F) {
	f.Add([]byte("7f0000001000 40 LazyCompile:*hot /tmp/hot.js:3\n0x10 0x10 a b c\n"))
	f.Add([]byte("ffffffffffffff00 200 wraps\n1 1 x\n1 1 y\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		syms, _ := ParsePerfMap(data)
		for _, s := range syms {
			if s.Size == 0 || s.Start+s.Size < s.Start || s.Name == "" {
				t.Errorf("bad symbol %+v", s)
			}
		}
		pm := &perfMap{}
		pm.add(syms)
		for i := 1; i < len(pm.segs); i++ {
			if pm.segs[i].start < pm.segs[i-1].end || pm.segs[i].start >= pm.segs[i].end {
				t.Fatalf("segments overlap or are empty: %+v", pm.segs)
			}
		}
		for _, s := range syms {
			if pm.lookup(s.Start) == nil {
				t.Errorf("lookup(%#x) found nothing", s.Start)
			}
		}
	})
}
