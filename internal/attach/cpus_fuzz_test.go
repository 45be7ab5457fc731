package attach

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// FuzzParseCPUList: any input either fails or gives ascending, distinct
// CPU ids below maxCPU that the list names, and writing them back as a
// list parses to the same ids.
func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0", "0-3,5,7-8", " 1 , 0 ", "3-3", "0-1,1-2", "", "-", "1-", "2-1", "65535", "65536", "0x1", "1,,2", "\n0-1\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cpus, err := ParseCPUList(s)
		if err != nil {
			if cpus != nil {
				t.Fatalf("ParseCPUList(%q) = %v and error %v", s, cpus, err)
			}
			return
		}
		if len(cpus) == 0 {
			t.Fatalf("ParseCPUList(%q) = no CPUs, no error", s)
		}
		for i, c := range cpus {
			if c < 0 || c >= maxCPU || i > 0 && c <= cpus[i-1] {
				t.Fatalf("ParseCPUList(%q) = %v: not ascending distinct ids below %d", s, cpus, maxCPU)
			}
		}
		var parts []string
		for _, c := range cpus {
			parts = append(parts, fmt.Sprint(c))
		}
		again, err := ParseCPUList(strings.Join(parts, ","))
		if err != nil || !slices.Equal(again, cpus) {
			t.Fatalf("ParseCPUList(%q) = %v, but its list parses to %v, %v", s, cpus, again, err)
		}
	})
}
