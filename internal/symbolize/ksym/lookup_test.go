package ksym

import (
	"bufio"
	"errors"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gprofile/gprofile/internal/testutil"
)

// procKallsyms reads /proc/kallsyms: the names at each address, the
// addresses of text symbols (type t or T: what stacks hold) in file
// order, and the module of each module symbol.
func procKallsyms(t *testing.T) (names map[uint64][]string, text []uint64, modules map[uint64]string) {
	t.Helper()
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names = make(map[uint64][]string)
	modules = make(map[uint64]string)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 {
			continue
		}
		a, err := strconv.ParseUint(fields[0], 16, 64)
		if err != nil {
			t.Fatalf("/proc/kallsyms line %q: %v", sc.Text(), err)
		}
		if _, seen := names[a]; !seen && strings.EqualFold(fields[1], "t") {
			text = append(text, a)
		}
		names[a] = append(names[a], fields[2])
		if len(fields) > 3 {
			modules[a] = strings.Trim(fields[3], "[]")
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names, text, modules
}

var symbolText = regexp.MustCompile(`^(\S+)\+0x([0-9a-f]+)/0x([0-9a-f]+)(?: \[(\S+)\])?$`)

// TestLookup checks the BPF lookup against /proc/kallsyms:
// the text range is _stext.._etext; every 50th text symbol (kernel image,
// modules and BPF programs alike; more than one batch) is named at its
// address with offset 0 and at address+1 with offset 1, by one of the
// names kallsyms lists at that address, with its module; an address
// outside the kernel is "0x...". Repeated opens leak no fds.
func TestLookup(t *testing.T) {
	testutil.RequirePrivileges(t)
	l, err := OpenLookup()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	names, order, modules := procKallsyms(t)
	if names[0] != nil || len(order) == 0 {
		testutil.Skipf(t, "/proc/kallsyms hides addresses from root here (kernel.kptr_restrict=2)")
	}
	start, end := l.TextRange()
	if !slices.Contains(names[start], "_stext") || !slices.Contains(names[end], "_etext") {
		t.Errorf("TextRange() = %#x, %#x; /proc/kallsyms names %v and %v there", start, end, names[start], names[end])
	}

	sorted := slices.Sorted(slices.Values(order))
	var addrs []uint64
	var offs []uint64
	for i, a := range sorted {
		if i%50 != 0 || i+1 == len(sorted) || sorted[i+1] < a+2 {
			continue
		}
		addrs = append(addrs, a, a+1)
		offs = append(offs, 0, 1)
	}
	// A BPF program: the lookup's own, listed as [bpf].
	for a, m := range modules {
		if m == "bpf" && strings.HasSuffix(names[a][0], "_lookup") {
			addrs = append(addrs, a)
			offs = append(offs, 0)
		}
	}
	addrs = append(addrs, 0x1000)
	if len(addrs) <= 2*LookupBatch {
		t.Fatalf("only %d addresses to look up", len(addrs))
	}
	texts := make([]string, len(addrs))
	if err := l.Lookup(addrs, texts); err != nil {
		t.Fatal(err)
	}
	if texts[len(texts)-1] != "0x1000" {
		t.Errorf("Lookup(0x1000) = %q, want 0x1000", texts[len(texts)-1])
	}
	bad := 0
	for i, a := range addrs[:len(addrs)-1] {
		m := symbolText.FindStringSubmatch(texts[i])
		base := a - offs[i]
		if m == nil || m[2] != strconv.FormatUint(offs[i], 16) || !slices.Contains(names[base], m[1]) || m[4] != modules[base] && modules[base] != "bpf" {
			if bad++; bad <= 10 {
				t.Errorf("Lookup(%#x) = %q; kallsyms has %v [%s] at %#x", a, texts[i], names[base], modules[base], base)
			}
		}
	}
	t.Logf("%d addresses named, %d wrong", len(addrs), bad)

	if err := l.Lookup(addrs[:2], texts[:1]); err == nil {
		t.Error("Lookup with fewer texts than addresses: no error")
	}
}

// TestLookupLeaks: opening and closing many times leaves the
// fd count where it was, and Close is idempotent.
func TestLookupLeaks(t *testing.T) {
	testutil.RequirePrivileges(t)
	before := countFDs(t)
	for range 20 {
		l, err := OpenLookup()
		if err != nil {
			t.Fatal(err)
		}
		texts := make([]string, 1)
		if err := l.Lookup([]uint64{0x1000}, texts); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	}
	if after := countFDs(t); after != before {
		t.Errorf("%d fds open after 20 opens and closes, %d before", after, before)
	}
}

// TestLookupHidden: with kernel.kptr_restrict=2 (kallsyms
// hides addresses even from root), opening fails with
// ErrHidden rather than naming what the sysctl hides.
func TestLookupHidden(t *testing.T) {
	testutil.RequirePrivileges(t)
	restore := testutil.SetSysctl(t, "kernel.kptr_restrict", "2")
	l, err := OpenLookup()
	restore()
	if err == nil {
		l.Close()
		t.Fatal("opened with kernel.kptr_restrict=2")
	}
	if !errors.Is(err, ErrHidden) {
		t.Errorf("error %v, want ErrHidden", err)
	}
}

// BenchmarkLookup: the cost of naming one address, in
// batches of LookupBatch distinct kernel text addresses.
func BenchmarkLookup(b *testing.B) {
	testutil.RequirePrivileges(b)
	l, err := OpenLookup()
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	start, end := l.TextRange()
	addrs := make([]uint64, LookupBatch)
	for i := range addrs {
		addrs[i] = start + uint64(i)*(end-start)/uint64(len(addrs))
	}
	texts := make([]string, len(addrs))
	b.ResetTimer()
	for range b.N {
		if err := l.Lookup(addrs, texts); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(addrs)), "ns/address")
	if texts[1] == "" || texts[1][0] == '0' {
		b.Fatalf("text %q", texts[1])
	}
}

// countFDs returns how many file descriptors this process has open
// (/proc/self/fd).
func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
