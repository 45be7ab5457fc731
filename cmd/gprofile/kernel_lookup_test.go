package main

import (
	"bufio"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize"
	"github.com/gprofile/gprofile/internal/testutil"
)

// TestKernelLookupMatchesKallsyms: the symbolizer gprofile builds (kernel
// names from the BPF lookup, openKernelLookup) names kernel frames as one
// that lists /proc/kallsyms does: for 2000 addresses spread over the
// kernel's text symbols, as leaf and as return address, the same
// function start and mapping, and a name listed at that start (kallsyms
// has aliases at one address, such as _stext and _text).
func TestKernelLookupMatchesKallsyms(t *testing.T) {
	testutil.RequirePrivileges(t)
	lookup, err := symbolize.New(symbolize.Options{KernelLookup: openKernelLookup, KallsymsPath: "/nonexistent"})
	if err != nil {
		t.Fatal(err)
	}
	defer lookup.Close()
	listing, err := symbolize.New(symbolize.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer listing.Close()
	if note := lookup.Note(); note != "" {
		t.Fatalf("lookup symbolizer: %s", note)
	}
	if note := listing.Note(); note != "" {
		t.Fatalf("kallsyms as root: %s", note) // root reads real addresses unless kptr_restrict=2
	}

	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names := make(map[uint64][]string)
	var text []uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		a, err := strconv.ParseUint(fields[0], 16, 64)
		if err != nil || len(fields) < 3 {
			t.Fatalf("/proc/kallsyms line %q", sc.Text())
		}
		names[a] = append(names[a], fields[2])
		if fields[1] == "t" || fields[1] == "T" {
			text = append(text, a)
		}
	}
	step := max(len(text)/2000, 1)
	compared, differ := 0, 0
	for i := 0; i < len(text); i += step {
		// The leaf at the symbol plus 7; a return address one past it.
		ips := []uint64{text[i] + 7, text[i] + 8}
		a := lookup.Stack(1, ips, nil).Frames
		b := listing.Stack(1, ips, nil).Frames
		for j := range ips {
			compared++
			same := a[j].SymbolStart == b[j].SymbolStart && a[j].Reason == b[j].Reason &&
				(a[j].Mapping == nil) == (b[j].Mapping == nil) &&
				(a[j].Mapping == nil || a[j].Mapping.Path == b[j].Mapping.Path)
			if a[j].Function != b[j].Function && !slices.Contains(names[a[j].SymbolStart], a[j].Function) {
				same = false
			}
			if !same {
				if differ++; differ <= 10 {
					t.Errorf("%#x: lookup %q at %#x (%v), kallsyms listing %q at %#x (%v)", ips[j],
						a[j].Function, a[j].SymbolStart, a[j].Reason, b[j].Function, b[j].SymbolStart, b[j].Reason)
				}
			}
		}
	}
	t.Logf("%d frames compared, %d differ", compared, differ)
	if compared < 2000 {
		t.Errorf("only %d frames compared", compared)
	}
}
