package objfile

import (
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
)

// BenchmarkLookupLinesWarm measures Binary.Lines on warm per-CU caches:
// every address of the functions, each already looked up once, with
// inlined frames expanded.
func BenchmarkLookupLinesWarm(b *testing.B) {
	b.Run("inline.c", func(b *testing.B) {
		bin := symtest.BuildInline(b)
		var addrs []uint64
		for _, fn := range []string{"work", "plain", "main"} {
			addrs = append(addrs, symtest.SymbolRange(b, bin, fn)...)
		}
		benchLines(b, bin, addrs)
	})
	b.Run("libc", func(b *testing.B) {
		libc, debug := symtest.LibcDebugFile(b)
		lb, err := Open(libc)
		if err != nil || lb.DebugFile() != debug {
			b.Fatalf("Open(%s): DebugFile() = %q, %v; want %s", libc, lb.DebugFile(), err, debug)
		}
		var addrs []uint64
		for _, name := range []string{"__libc_start_call_main", "malloc", "__vfprintf_internal", "memcpy", "qsort_r"} {
			s, ok := symtest.FindSymbol(lb.DebugFile(), name)
			for a := s.Value; ok && a < s.Value+s.Size; a += 3 {
				addrs = append(addrs, a)
			}
		}
		benchLines(b, libc, addrs)
	})
}

// benchLines runs Lines over addrs of the binary at path, after one
// warming pass.
func benchLines(b *testing.B, path string, addrs []uint64) {
	bin, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	if len(addrs) == 0 {
		b.Fatal("no addresses")
	}
	frames := 0
	for _, a := range addrs {
		frames += len(bin.Lines(a))
	}
	i := 0
	for b.Loop() {
		bin.Lines(addrs[i])
		if i++; i == len(addrs) {
			i = 0
		}
	}
	b.ReportMetric(float64(frames)/float64(len(addrs)), "frames/addr")
}
