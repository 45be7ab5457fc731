package gopclntab

import (
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"runtime"
	"runtime/debug"

	"github.com/gprofile/gprofile/internal/symbolize/elfio"
	"github.com/gprofile/gprofile/internal/symbolize/srcline"
)

// Table is the .gopclntab of a binary, parsed on first use: the
// symbol source of Go binaries without .symtab and the line source of Go
// binaries without DWARF; raw holds the bytes, shared with the inline
// decoder (NewInlineLines).
type Table struct {
	File    *elf.File       // the binary, opened over Reader
	Reader  *elfio.ReaderAt // reads .gopclntab within its budget
	done    bool
	tab     *gosym.Table
	rawDone bool
	rawData []byte
	// Mapped holds rawData's mapping when .gopclntab is mapped from the
	// file (elfio.MapSection), nil when it was read into the heap: what
	// keeps slices of rawData must keep it.
	Mapped *elfio.Mapping
}

// raw returns the bytes of .gopclntab, mapped from the file (Mapped) or
// else read on first use (at most maxPclntabBytes), and shared by get and
// the inline decoder (NewInlineLines); nil when the binary has none or it
// cannot be read. Callers must not modify the slice, and read it with
// debug.SetPanicOnFault (elfio.Mapping).
func (g *Table) raw() []byte {
	if g.rawDone {
		return g.rawData
	}
	g.rawDone = true
	sec := g.File.Section(".gopclntab")
	if sec == nil || sec.Type == elf.SHT_NOBITS {
		return nil
	}
	if m := elfio.MapSection(g.Reader, sec, elfio.MaxPclntabBytes); m != nil {
		g.Mapped, g.rawData = m, m.Data
		return m.Data
	}
	data, err := elfio.SectionData(g.Reader, sec, elfio.MaxPclntabBytes)
	if err != nil {
		return nil
	}
	g.rawData = data
	return data
}

// Get returns the parsed table, or nil when the binary has none or it
// does not parse (including when debug/gosym panics or the mapped
// section faults).
func (g *Table) Get() *gosym.Table {
	if g.done {
		return g.tab
	}
	g.done = true
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if recover() != nil {
			g.tab = nil
		}
	}()
	data := g.raw()
	if data == nil {
		return nil
	}
	g.tab, _ = gosym.NewTable(nil, gosym.NewLineTable(data, goTextStart(g.File, data)))
	return g.tab
}

// GosymLines reads lines from .gopclntab (gosym's PCToLine). It knows the
// physical function only: inlining is recorded in .gopclntab, but gosym
// does not expose it.
// Keep is the mapping Tab's bytes live in (Table.Mapped), nil for heap bytes.
type GosymLines struct {
	Tab  *gosym.Table
	Keep *elfio.Mapping
}

// Lines returns the one source line of pc, or nil (also when the mapped
// section faults).
func (g GosymLines) Lines(pc uint64) (out []srcline.Line) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if recover() != nil {
			out = nil
		}
		runtime.KeepAlive(g.Keep)
	}()
	file, line, fn := g.Tab.PCToLine(pc)
	if fn == nil {
		return nil
	}
	return []srcline.Line{{Function: fn.Name, SystemName: fn.Name, File: file, Line: line}}
}

// goTextStart returns the ELF address of runtime.text, which .gopclntab
// offsets are relative to: the textStart word of a Go 1.18+ table header
// when the file holds it (0 in PIE files, where a relocation fills it in),
// else the start of .text.
func goTextStart(f *elf.File, pcln []byte) uint64 {
	if len(pcln) >= 8 {
		ptr := int(pcln[7])
		magic := f.ByteOrder.Uint32(pcln)
		if (magic == 0xfffffff0 || magic == 0xfffffff1) && len(pcln) >= 8+3*ptr {
			if v := readWord(f.ByteOrder, pcln[8+2*ptr:], ptr); v != 0 {
				return v
			}
		}
	}
	if text := f.Section(".text"); text != nil {
		return text.Addr
	}
	return 0
}

// readWord reads a 4- or 8-byte word; 0 for other sizes.
func readWord(order binary.ByteOrder, b []byte, size int) uint64 {
	switch size {
	case 4:
		return uint64(order.Uint32(b))
	case 8:
		return order.Uint64(b)
	}
	return 0
}
