package kallsyms

import (
	"fmt"
	"strings"
	"testing"
)

// FuzzParseModuleLine: any /proc/modules line either is rejected or gives
// a named module with a non-zero start and an extent that does not wrap,
// and a line written from that result parses back to it.
func FuzzParseModuleLine(f *testing.F) {
	for _, s := range []string{
		"ext4 1089536 2 - Live 0xffffffffc0a00000",
		"nf_tables 372736 0 - Live 0x0000000000000000",
		"mbcache 16384 1 ext4, Live 0xffffffffc0400000 (E)",
		"huge 18446744073709551615 0 - Live 0xffffffffc0000000",
		"short 1 2 - Live",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		name, r, ok := ParseModuleLine(line)
		if !ok {
			if name != "" || r != (AddrRange{}) {
				t.Fatalf("rejected %q but returned %q, %+v", line, name, r)
			}
			return
		}
		if name == "" || strings.ContainsAny(name, " \t\n") || r.Start == 0 || r.End < r.Start {
			t.Fatalf("ParseModuleLine(%q) = %q, %+v", line, name, r)
		}
		again := fmt.Sprintf("%s %d 0 - Live %#x", name, r.End-r.Start, r.Start)
		if n2, r2, ok2 := ParseModuleLine(again); !ok2 || n2 != name || r2 != r {
			t.Fatalf("ParseModuleLine(%q) = %q, %+v; written back as %q it parses to %q, %+v, %v", line, name, r, again, n2, r2, ok2)
		}
	})
}
