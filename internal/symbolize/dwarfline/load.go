package dwarfline

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"math"
	"runtime/debug"
	"slices"
	"strings"
	"sync"

	"github.com/gprofile/gprofile/internal/symbolize/elfio"
)

// maxDWARFBytes caps the DWARF sections one binary may hold in memory
// (bytes, decompressed); a binary over the cap gets no DWARF lines.
const maxDWARFBytes = 512 << 20

// dwarfSections are the DWARF sections lines and inlined frames need,
// by name without the ".debug_" prefix. Location lists, call frame
// information, type units and name indexes are never read.
var dwarfSections = []string{"abbrev", "info", "str", "line", "ranges", "addr", "line_str", "rnglists", "str_offsets", "aranges"}

// Load reads the DWARF sections of f that dwarfSections lists
// (.debug_* or GNU-compressed .zdebug_*, decompressed) and checks their
// unit headers. It returns nil when f has no .debug_info, when the
// sections are over maxDWARFBytes together, or when .debug_info has no
// valid unit header, including when debug/elf panics. Executables and
// shared objects need no relocations applied to their DWARF. With a
// cache, compressed sections come from it where it has them (keyed by
// f's build ID; a file without one is not cached).
func Load(f *elf.File, lr *elfio.ReaderAt, cache *SectionCache) (d *Data) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true)) // mapped sections
	defer func() {
		if recover() != nil {
			d = nil
		}
	}()
	secs := make(map[string]*elf.Section, len(dwarfSections))
	var total uint64
	for _, s := range f.Sections {
		name := dwarfName(s.Name)
		if name == "" || s.Type == elf.SHT_NOBITS || secs[name] != nil || !slices.Contains(dwarfSections, name) {
			continue
		}
		secs[name] = s
		total += s.Size
	}
	if secs["info"] == nil || total > maxDWARFBytes {
		return nil
	}
	// .zdebug sections tell their size only in their header, read by Open.
	total = 0
	for _, s := range secs {
		s.Open()
		total += s.Size
	}
	if total > maxDWARFBytes {
		return nil
	}
	// Read (and decompress) the sections in parallel: Go binaries and
	// distributions' debug files compress theirs, and .debug_info and
	// .debug_line are both large.
	type result struct {
		name string
		data sectionBytes
		err  error
	}
	results := make(chan result, len(secs))
	var id string
	if cache != nil {
		id = elfio.BuildID(f)
	}
	// Sections read a page at a time from the file need a reader that
	// outlives it (objfile.Load's caller closes the file when Load returns).
	retain := sync.OnceValue(lr.Retain)
	for name, s := range secs {
		go func() {
			r := result{name: name}
			defer func() {
				if p := recover(); p != nil { // debug/elf on corrupt input
					r.data, r.err = sectionBytes{}, fmt.Errorf("read section %s: panic: %v", s.Name, p)
				}
				results <- r
			}()
			slot := cache.slot(id, name, s.FileSize)
			r.data, r.err = dwarfSectionData(lr, f, s, maxDWARFBytes, slices.Contains(lazySections, name), slot, retain)
		}()
	}
	data := make(map[string][]byte, len(secs))
	lazy := make(map[string]*lazySection)
	var failed bool
	for range secs {
		r := <-results
		failed = failed || r.err != nil
		data[r.name] = r.data.data
		if r.data.lazy != nil {
			lazy[r.name] = r.data.lazy
		}
	}
	if failed {
		return nil
	}
	d = &Data{big: f.ByteOrder == binary.BigEndian,
		InfoZ: lazy["info"], AbbrevZ: lazy["abbrev"], LineZ: lazy["line"],
		strZ: lazy["str"], lineStrZ: lazy["line_str"], rangesZ: lazy["ranges"], rnglistsZ: lazy["rnglists"]}
	return d.init(data)
}

// dwarfFromSections returns the DWARF of little-endian section contents,
// by name without the ".debug_" prefix, with its unit headers read; nil
// when .debug_info holds no valid unit header.
func dwarfFromSections(data map[string][]byte) *Data {
	return newDWARFData(data, false)
}

// newDWARFData returns the DWARF of section contents, by name without
// the ".debug_" prefix, big-endian or not, with its unit headers read;
// nil when .debug_info holds no valid unit header.
func newDWARFData(data map[string][]byte, big bool) *Data {
	return (&Data{big: big}).init(data)
}

// init sets d's sections from data, by name without the ".debug_"
// prefix, and reads its unit headers: all of them, or only the first
// when .debug_info is inflated on demand (d.infoZ). It returns d, or nil
// when .debug_info holds no valid unit header.
func (d *Data) init(data map[string][]byte) *Data {
	d.info, d.abbrev, d.str, d.lineStr = data["info"], data["abbrev"], data["str"], data["line_str"]
	d.line, d.ranges, d.rnglists, d.addr = data["line"], data["ranges"], data["rnglists"], data["addr"]
	d.strOffset, d.aranges = data["str_offsets"], data["aranges"]
	through := uint64(math.MaxUint64)
	if d.InfoZ != nil {
		through = 0
	}
	d.readUnitsThrough(through)
	if len(d.units) == 0 {
		return nil
	}
	return d
}

// dwarfName returns the name of a DWARF section without its .debug_ or
// .zdebug_ prefix, or "" for other sections.
func dwarfName(section string) string {
	if name, ok := strings.CutPrefix(section, ".debug_"); ok {
		return name
	}
	if name, ok := strings.CutPrefix(section, ".zdebug_"); ok {
		return name
	}
	return ""
}
