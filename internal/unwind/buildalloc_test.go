package unwind

import (
	"debug/elf"
	"runtime"
	"testing"

	"github.com/gprofile/gprofile/internal/testutil"
)

// TestBuildLibcAllocs bounds what building libc's table allocates: the
// builder reuses its CFA machine and FDE record from FDE to FDE and sizes
// its row slices up front (BENCHMARKS.md, "User stack unwinding", has
// before and after). Bytes and counts do not depend on the machine's
// load, unlike BenchmarkBuildLibc's time.
func TestBuildLibcAllocs(t *testing.T) {
	f, err := elf.Open("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		testutil.Skipf(t, "%v", err)
	}
	defer f.Close()
	NewTable(f) // warm debug/elf's section caches
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	tab, err := NewTable(f)
	runtime.ReadMemStats(&b)
	if err != nil {
		t.Fatal(err)
	}
	bytes, allocs := b.TotalAlloc-a.TotalAlloc, b.Mallocs-a.Mallocs
	t.Logf("libc: %d rows, table %d bytes; build allocated %d bytes in %d allocations", tab.Rows(), tab.Bytes(), bytes, allocs)
	if bytes > 3<<20 || allocs > 1000 {
		t.Errorf("building libc's table allocated %d bytes in %d allocations, want under 3 MiB and 1000", bytes, allocs)
	}
}
