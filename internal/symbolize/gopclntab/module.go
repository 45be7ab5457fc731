package gopclntab

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"runtime/debug"

	"github.com/gprofile/gprofile/internal/symbolize/elfio"
)

// go120PclntabMagic is the first word of a Go 1.20+ .gopclntab
// (abi.Go120PCLnTabMagic). The tables, runtime._func, the 16-byte
// runtime.inlinedCall and the start of runtime.moduledata that the
// decoder reads are the same from Go 1.20 through 1.26; older tables
// (Go 1.18 and 1.19 with magic 0xfffffff0, whose inlinedCall differs)
// are left to DWARF and gosym.
const go120PclntabMagic = 0xfffffff1

// Word indexes in runtime.moduledata (runtime/symtab.go, Go 1.20
// through 1.26), counting a slice as three words (pointer, length,
// capacity).
const (
	mdPcHeader    = 0  // pcHeader: the address of .gopclntab
	mdFuncnametab = 1  // funcnametab slice: pcHeader + funcnameOffset
	mdFtab        = 16 // ftab slice: pcHeader + pclnOffset, nfunc+1 entries
	mdMinpc       = 20 // minpc: the first function's entry
	mdMaxpc       = 21 // maxpc: the end of the last function
	mdText        = 22 // text: runtime.text, the base of entryOff
	mdEtext       = 23 // etext
	mdTypes       = 37 // types
	mdEtypes      = 38 // etypes
	mdRodata      = 39 // rodata
	mdGofunc      = 40 // gofunc: go:func.*, the base of funcdata offsets
	mdWords       = 41 // the words read
)

// moduleSections are the sections that hold runtime.firstmoduledata, in
// the order they are searched: .go.module (Go 1.26 linker), .noptrdata
// (older linkers), and .data.rel.ro and .data for other build modes.
var moduleSections = []string{".go.module", ".noptrdata", ".data.rel.ro", ".data"}

// maxModuleScanBytes caps the bytes of moduleSections searched for
// runtime.firstmoduledata, per section.
const maxModuleScanBytes = 64 << 20

// NewInlineLines returns the .gopclntab line source (with inlined
// frames) of the Go binary f, whose .gopclntab gt reads; nil when the
// table is not a Go 1.20+ one (magic 0xfffffff1), when its header is
// inconsistent, or when runtime.firstmoduledata, which
// gives runtime.text and go:func.* (the base of funcdata offsets), is not
// found in the sections moduleSections lists with its words in the file
// (Go's linker writes them even where a dynamic relocation also fills
// them in, as in PIE; other linkers may not). The caller then uses DWARF
// or gosym. It never panics.
func NewInlineLines(f *elf.File, lr *elfio.ReaderAt, gt *Table) (g *InlineLines) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true)) // a mapped section whose file shrank
	defer func() {
		if recover() != nil {
			g = nil
		}
	}()
	sec := f.Section(".gopclntab")
	data := gt.raw()
	if sec == nil || data == nil {
		return nil
	}
	g = parsePclnHeader(f.ByteOrder, data)
	if g == nil {
		return nil
	}
	md := findModuledata(f, lr, g, sec.Addr)
	if md == nil {
		return nil
	}
	g.text = md[mdText]
	var gm *elfio.Mapping
	g.gofunc, gm = gofuncData(f, lr, md[mdGofunc], sec, data)
	if g.gofunc == nil {
		return nil
	}
	for _, m := range []*elfio.Mapping{gt.Mapped, gm} {
		if m != nil {
			g.keep = append(g.keep, m)
		}
	}
	return g
}

// parsePclnHeader checks the Go 1.20+ pcHeader at the start of data
// (.gopclntab, byte order order) and returns the decoder over its tables,
// without text and gofunc; nil when the magic, pointer size or
// instruction quantum is unknown or a table lies outside data.
func parsePclnHeader(order binary.ByteOrder, data []byte) *InlineLines {
	if len(data) < 8 || order.Uint32(data) != go120PclntabMagic || data[4] != 0 || data[5] != 0 {
		return nil
	}
	q, ptr := data[6], int(data[7])
	if (q != 1 && q != 2 && q != 4) || (ptr != 4 && ptr != 8) || len(data) < 8+8*ptr {
		return nil
	}
	var w [8]uint64 // nfunc, nfiles, (textStart), funcname, cu, filetab, pctab, pcln
	for i := range w {
		w[i] = readWord(order, data[8+i*ptr:], ptr)
	}
	nfunc := w[0]
	offs := []uint64{w[3], w[4], w[5], w[6], w[7], uint64(len(data))}
	for i := 1; i < len(offs); i++ {
		if offs[i-1] > offs[i] {
			return nil
		}
	}
	if offs[0] < uint64(8+8*ptr) {
		return nil
	}
	g := &InlineLines{
		order: order, ptr: ptr, quantum: uint64(q), nfunc: int(nfunc),
		funcnames: data[w[3]:w[4]], cutab: data[w[4]:w[5]], filetab: data[w[5]:w[6]],
		pctab: data[w[6]:w[7]], pclntable: data[w[7]:],
		funcnameOff: w[3], pclnOff: w[7],
	}
	if nfunc == 0 || nfunc >= uint64(len(g.pclntable))/8 { // nfunc+1 functab entries
		return nil
	}
	return g
}

// findModuledata returns the first mdWords words of
// runtime.firstmoduledata, found by its first word (pcHeader) equal to
// pclnAddr, the ELF address of .gopclntab, and checked against the header
// of g; nil when no section of moduleSections holds such a moduledata.
func findModuledata(f *elf.File, lr *elfio.ReaderAt, g *InlineLines, pclnAddr uint64) []uint64 {
	var key [8]byte
	if g.ptr == 8 {
		f.ByteOrder.PutUint64(key[:], pclnAddr)
	} else {
		f.ByteOrder.PutUint32(key[:], uint32(pclnAddr))
	}
	for _, name := range moduleSections {
		s := f.Section(name)
		if s == nil || s.Type == elf.SHT_NOBITS {
			continue
		}
		data, err := elfio.SectionData(lr, s, maxModuleScanBytes)
		if err != nil {
			continue
		}
		for off := 0; off+mdWords*g.ptr <= len(data); off++ {
			i := bytes.Index(data[off:], key[:g.ptr])
			if i < 0 {
				break
			}
			off += i
			if (s.Addr+uint64(off))%uint64(g.ptr) != 0 {
				continue
			}
			if md := g.checkModuledata(f, data[off:], pclnAddr); md != nil {
				return md
			}
		}
	}
	return nil
}

// checkModuledata returns the first mdWords words of b when they are a
// moduledata for the table g at pclnAddr: funcnametab and ftab where the
// header puts them, ftab nfunc+1 entries long, minpc, maxpc within text
// and etext, and rodata <= gofunc; nil otherwise.
func (g *InlineLines) checkModuledata(f *elf.File, b []byte, pclnAddr uint64) []uint64 {
	if len(b) < mdWords*g.ptr {
		return nil
	}
	md := make([]uint64, mdWords)
	for i := range md {
		md[i] = readWord(f.ByteOrder, b[i*g.ptr:], g.ptr)
	}
	switch {
	case md[mdPcHeader] != pclnAddr,
		md[mdFuncnametab] != pclnAddr+g.funcnameOff,
		md[mdFtab] != pclnAddr+g.pclnOff,
		md[mdFtab+1] != uint64(g.nfunc)+1,
		md[mdText] > md[mdMinpc] || md[mdMinpc] >= md[mdMaxpc] || md[mdMaxpc] > md[mdEtext],
		md[mdTypes] > md[mdEtypes],
		md[mdRodata] > md[mdGofunc]:
		return nil
	}
	return md
}

// gofuncData returns the bytes from the ELF address gofunc to the end of
// the section that holds it: pcln (the bytes of .gopclntab, section
// pclnSec) when it lies there, as with the Go 1.26 linker, else that
// section mapped from the file (with its mapping) or read whole; nil
// when no allocated section with contents holds gofunc.
func gofuncData(f *elf.File, lr *elfio.ReaderAt, gofunc uint64, pclnSec *elf.Section, pcln []byte) ([]byte, *elfio.Mapping) {
	if gofunc >= pclnSec.Addr && gofunc-pclnSec.Addr < uint64(len(pcln)) {
		return pcln[gofunc-pclnSec.Addr:], nil
	}
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_ALLOC == 0 || s.Type == elf.SHT_NOBITS || gofunc < s.Addr || gofunc-s.Addr >= s.Size {
			continue
		}
		if m := elfio.MapSection(lr, s, elfio.MaxPclntabBytes); m != nil {
			return m.Data[gofunc-s.Addr:], m
		}
		data, err := elfio.SectionData(lr, s, elfio.MaxPclntabBytes)
		if err != nil || gofunc-s.Addr >= uint64(len(data)) {
			return nil, nil
		}
		return data[gofunc-s.Addr:], nil
	}
	return nil, nil
}
