package elfio

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"io"
)

// maxNoteBytes caps how much of one note segment or section is read
// (bytes); build-ID notes are a few dozen bytes.
const maxNoteBytes = 1 << 16

// ntGNUBuildID is the note type of the GNU build ID (NT_GNU_BUILD_ID).
const ntGNUBuildID = 3

// BuildID returns the hex NT_GNU_BUILD_ID of f from its PT_NOTE segments,
// or else its SHT_NOTE sections; "" when there is none or it is unreadable.
func BuildID(f *elf.File) string {
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		if id := noteBuildID(f.ByteOrder, p.Open(), p.Align); id != "" {
			return id
		}
	}
	return SectionsBuildID(f)
}

// SectionsBuildID returns the hex NT_GNU_BUILD_ID of f from its SHT_NOTE
// sections, the only place a separate debug file (objcopy
// --only-keep-debug) keeps it; "" when there is none.
func SectionsBuildID(f *elf.File) string {
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOTE {
			continue
		}
		if id := noteBuildID(f.ByteOrder, s.Open(), s.Addralign); id != "" {
			return id
		}
	}
	return ""
}

// noteBuildID scans the notes read from r for a GNU build ID. Notes are
// padded to 4 bytes, or to 8 in segments and sections aligned to 8 (such
// as .note.gnu.property).
func noteBuildID(order binary.ByteOrder, r io.Reader, align uint64) string {
	pad := Align4
	if align == 8 {
		pad = align8
	}
	data, err := io.ReadAll(io.LimitReader(r, maxNoteBytes))
	if err != nil {
		return ""
	}
	for len(data) >= 12 {
		namesz, descsz, typ := order.Uint32(data), order.Uint32(data[4:]), order.Uint32(data[8:])
		nameEnd := pad(12 + uint64(namesz))
		descEnd := pad(nameEnd + uint64(descsz))
		if nameEnd+uint64(descsz) > uint64(len(data)) {
			return ""
		}
		name := data[12 : 12+uint64(namesz)]
		if typ == ntGNUBuildID && bytes.Equal(name, []byte("GNU\x00")) && descsz > 0 {
			return hex.EncodeToString(data[nameEnd : nameEnd+uint64(descsz)])
		}
		data = data[min(descEnd, uint64(len(data))):]
	}
	return ""
}

// Align4 rounds n up to a multiple of 4, the note field alignment.
func Align4(n uint64) uint64 { return (n + 3) &^ 3 }

// align8 rounds n up to a multiple of 8.
func align8(n uint64) uint64 { return (n + 7) &^ 7 }
