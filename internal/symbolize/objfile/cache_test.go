package objfile

import (
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
)

// BenchmarkSectionCacheLibc: loading glibc and naming start_thread's
// lines (its unit is a third into the 5.8 MB .debug_info of libc6-dbg),
// as the first libc frame of a run does: inflating, against reading
// what an earlier run left in the section cache (the inflated sections,
// the symbol table and the line memo).
func BenchmarkSectionCacheLibc(b *testing.B) {
	libc, debug := symtest.LibcDebugFile(b)
	lb, err := Open(libc)
	if err != nil || lb.DebugFile() != debug {
		b.Fatalf("Open(%s): DebugFile() = %q, %v; want %s", libc, lb.DebugFile(), err, debug)
	}
	s, ok := symtest.FindSymbol(debug, "start_thread")
	if !ok {
		b.Fatalf("%s has no start_thread", debug)
	}
	load := func(b *testing.B, cacheDir string) {
		bin := loadWithCache(b, libc, cacheDir)
		if len(bin.Lines(s.Value+4)) == 0 {
			b.Fatal("no lines for start_thread")
		}
		bin.SaveCache()
	}
	b.Run("inflate", func(b *testing.B) {
		for range b.N {
			load(b, "")
		}
	})
	b.Run("cache", func(b *testing.B) {
		dir := b.TempDir()
		load(b, dir) // an earlier run
		b.ResetTimer()
		for range b.N {
			load(b, dir)
		}
	})
}
