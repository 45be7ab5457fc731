package gopclntab

import (
	"bytes"
	"debug/elf"
	"os"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/dwarfline"
	"github.com/gprofile/gprofile/internal/symbolize/elfio"
	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
	"github.com/gprofile/gprofile/internal/symbolize/srcline"
)

// BenchmarkGoLines compares the DWARF and .gopclntab line sources of
// cmd/gprofile (built at benchmark time): cold is loading the source
// from the ELF image in memory and the first Lines lookup (what a newly
// seen Go process costs), warm is one lookup on a loaded source, cycling
// through pcs of every function.
func BenchmarkGoLines(b *testing.B) {
	bin := symtest.BuildGo(b, b.TempDir(), "gprofile", "../../../cmd/gprofile")
	raw, err := os.ReadFile(bin)
	if err != nil {
		b.Fatal(err)
	}
	_, entries, ends := goFuncEntries(b, bin)
	pcs := samplePCs(entries, ends, 4)
	work, ok := symtest.GoFuncEntry(b, raw, "main.main")
	if !ok {
		b.Fatal("no main.main")
	}
	sources := []struct {
		name string
		load func(f *elf.File, lr *elfio.ReaderAt) srcline.Source
	}{
		{"dwarf", func(f *elf.File, lr *elfio.ReaderAt) srcline.Source {
			return dwarfline.NewTable(dwarfline.Load(f, lr, nil))
		}},
		{"pclntab", func(f *elf.File, lr *elfio.ReaderAt) srcline.Source {
			return NewInlineLines(f, lr, &Table{File: f, Reader: lr})
		}},
	}
	for _, src := range sources {
		b.Run(src.name+"/cold", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				f, lr, err := elfio.OpenELF(bytes.NewReader(raw))
				if err != nil {
					b.Fatal(err)
				}
				if len(src.load(f, lr).Lines(work)) == 0 {
					b.Fatal("no lines for main.main")
				}
			}
		})
		b.Run(src.name+"/warm", func(b *testing.B) {
			f, lr, err := elfio.OpenELF(bytes.NewReader(raw))
			if err != nil {
				b.Fatal(err)
			}
			ls := src.load(f, lr)
			for _, pc := range pcs {
				ls.Lines(pc)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				ls.Lines(pcs[i])
				if i++; i == len(pcs) {
					i = 0
				}
			}
		})
	}
}
