package symbolize

import (
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
	"github.com/gprofile/gprofile/internal/symbolize/objfile"
)

func TestBinaryBias(t *testing.T) {
	for _, tt := range []struct {
		name string
		pie  bool
		base uint64
	}{
		{"pie", true, 0x555555554000},
		{"no-pie", false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := symtest.BuildProg(t, tt.pie)
			b, err := objfile.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			m := textMapping(t, path, tt.base)
			leaf := symtest.ElfSymbol(t, path, "leaf")
			got, ok := b.ELFAddress(tt.base+leaf.Value, m.Start, m.Offset)
			if !ok || got != leaf.Value {
				t.Errorf("ELFAddress(%#x, %#x, %#x) = %#x, %v; want %#x", tt.base+leaf.Value, m.Start, m.Offset, got, ok, leaf.Value)
			}
			if bias, ok := b.Bias(m.Start, m.Offset); !ok || bias != tt.base {
				t.Errorf("Bias = %#x, %v; want %#x", bias, ok, tt.base)
			}
			if _, ok := b.Bias(m.Start, 1<<40); ok {
				t.Error("Bias(offset past the file) ok")
			}
		})
	}
}
