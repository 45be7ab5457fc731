package symbolize

import (
	"bytes"
	"debug/elf"
	"os"
	"testing"
)

// BenchmarkGoLines compares the DWARF and .gopclntab line sources of
// cmd/gprofile (built at benchmark time): cold is loading the source
// from the ELF image in memory and the first Lines lookup (what a newly
// seen Go process costs), warm is one lookup on a loaded source, cycling
// through pcs of every function.
func BenchmarkGoLines(b *testing.B) {
	bin := buildGo(b, b.TempDir(), "gprofile", "../../cmd/gprofile")
	raw, err := os.ReadFile(bin)
	if err != nil {
		b.Fatal(err)
	}
	_, entries, ends := goFuncEntries(b, bin)
	pcs := samplePCs(entries, ends, 4)
	work, ok := goFuncEntry(b, raw, "main.main")
	if !ok {
		b.Fatal("no main.main")
	}
	sources := []struct {
		name string
		load func(f *elf.File, lr *limitedReaderAt) lineSource
	}{
		{"dwarf", func(f *elf.File, lr *limitedReaderAt) lineSource { return newDWARFLines(loadDWARF(f, lr, nil)) }},
		{"pclntab", func(f *elf.File, lr *limitedReaderAt) lineSource {
			return newGoInlineLines(f, lr, &goTable{f: f, lr: lr})
		}},
	}
	for _, src := range sources {
		b.Run(src.name+"/cold", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				f, lr, err := openELF(bytes.NewReader(raw))
				if err != nil {
					b.Fatal(err)
				}
				if len(src.load(f, lr).lines(work)) == 0 {
					b.Fatal("no lines for main.main")
				}
			}
		})
		b.Run(src.name+"/warm", func(b *testing.B) {
			f, lr, err := openELF(bytes.NewReader(raw))
			if err != nil {
				b.Fatal(err)
			}
			ls := src.load(f, lr)
			for _, pc := range pcs {
				ls.lines(pc)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				ls.lines(pcs[i])
				if i++; i == len(pcs) {
					i = 0
				}
			}
		})
	}
}
