package perfmap

import (
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	text := "7f0000001000 40 LazyCompile:*hot /tmp/hot.js:3\n" +
		"0x7f0000002000 0x10 Builtin: ArgumentsAdaptorTrampoline\r\n" +
		"\n" +
		"7f0000003000 0 zero size\n" +
		"7f0000004000 10\n" +
		"zz 10 not hex\n" +
		"ffffffffffffff00 200 wraps around\n" +
		"7f0000005000\t20\tJS:~tab separated\n" +
		"7f0000006000 20 " + strings.Repeat("x", MaxLine) + "\n" +
		"12345678901234567 10 too many digits\n" +
		"7f0000007000 8 last line, no newline"
	syms, skipped := Parse([]byte(text))
	want := []Symbol{
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
	pm := &Table{}
	pm.Add([]Symbol{
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
		if sym := pm.Lookup(tt.addr); sym != nil {
			got = sym.Name
		}
		if got != tt.want {
			t.Errorf("lookup(%#x) = %q, want %q", tt.addr, got, tt.want)
		}
	}
	// A later line for the same code replaces the old name.
	pm.Add([]Symbol{{0x1000, 0x200, "recompiled"}})
	if sym := pm.Lookup(0x1050); sym == nil || sym.Name != "recompiled" {
		t.Errorf("after recompilation lookup = %+v", sym)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("7f0000001000 40 LazyCompile:*hot /tmp/hot.js:3\n0x10 0x10 a b c\n"))
	f.Add([]byte("ffffffffffffff00 200 wraps\n1 1 x\n1 1 y\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		syms, _ := Parse(data)
		for _, s := range syms {
			if s.Size == 0 || s.Start+s.Size < s.Start || s.Name == "" {
				t.Errorf("bad symbol %+v", s)
			}
		}
		pm := &Table{}
		pm.Add(syms)
		for i := 1; i < len(pm.segs); i++ {
			if pm.segs[i].start < pm.segs[i-1].end || pm.segs[i].start >= pm.segs[i].end {
				t.Fatalf("segments overlap or are empty: %+v", pm.segs)
			}
		}
		for _, s := range syms {
			if pm.Lookup(s.Start) == nil {
				t.Errorf("lookup(%#x) found nothing", s.Start)
			}
		}
	})
}
