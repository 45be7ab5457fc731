package symbolize

import (
	"debug/dwarf"
	"debug/elf"
	"slices"
	"strings"
)

// maxDWARFBytes caps the DWARF sections one binary may hold in memory
// (bytes, decompressed); a binary over the cap gets no DWARF lines.
const maxDWARFBytes = 512 << 20

// dwarfSections are the DWARF sections lines and inlined frames need,
// by name without the ".debug_" prefix. Location lists, call frame
// information, type units and name indexes are never read.
var dwarfSections = []string{"abbrev", "info", "str", "line", "ranges", "addr", "line_str", "rnglists", "str_offsets"}

// loadDWARF reads the DWARF sections of f that dwarfSections lists
// (.debug_* or GNU-compressed .zdebug_*, decompressed) and checks their
// unit headers. It returns nil when f has no .debug_info, when the
// sections are over maxDWARFBytes together, or when they are corrupt,
// including when debug/elf or debug/dwarf panics. Executables and shared
// objects need no relocations applied to their DWARF.
func loadDWARF(f *elf.File) (d *dwarf.Data) {
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
	data := make(map[string][]byte, len(secs))
	for name, s := range secs {
		b, err := s.Data()
		if err != nil {
			return nil
		}
		data[name] = b
	}
	d, err := dwarf.New(data["abbrev"], nil, nil, data["info"], data["line"], nil, data["ranges"], data["str"])
	if err != nil {
		return nil
	}
	for _, name := range dwarfSections[5:] { // the DWARF 5 sections
		if b := data[name]; b != nil {
			if err := d.AddSection(".debug_"+name, b); err != nil {
				return nil
			}
		}
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
