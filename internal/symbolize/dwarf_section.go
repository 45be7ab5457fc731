package symbolize

import (
	"bytes"
	"compress/flate"
	"debug/elf"
	"fmt"
	"io"
)

// elfCompressZlib is ELFCOMPRESS_ZLIB, the ch_type of an SHF_COMPRESSED
// section compressed with zlib.
const elfCompressZlib = 1

// dwarfSectionData returns the contents of the DWARF section s of f,
// decompressed, when they are at most max bytes and lie inside the file.
// Uncompressed sections are read with one ReadAt; SHF_COMPRESSED zlib
// sections (as distributions and the Go linker write them) are read
// whole and inflated straight into a buffer of the size their header
// gives, without the zlib Adler-32 check (a corrupt stream still fails
// to inflate or gives corrupt DWARF, which the reader survives). Other
// compressions (zstd, GNU .zdebug) go through sectionData.
func dwarfSectionData(lr *limitedReaderAt, f *elf.File, s *elf.Section, max uint64) ([]byte, error) {
	if s.Type == elf.SHT_NOBITS || !lr.inFile(s) || s.FileSize > max {
		return sectionData(lr, s, max) // for its error
	}
	compressed := s.Flags&elf.SHF_COMPRESSED != 0
	if !compressed && s.Name[1] == 'z' { // .zdebug_*
		return sectionData(lr, s, max)
	}
	raw := make([]byte, s.FileSize)
	if n, err := lr.ReadAt(raw, int64(s.Offset)); n < len(raw) {
		return nil, fmt.Errorf("read section %s: %w", s.Name, err)
	}
	if !compressed {
		return raw, nil
	}
	typ, size, hdr := compressionHeader(f, raw)
	if typ != elfCompressZlib || len(raw) < hdr+2 {
		return sectionData(lr, s, max)
	}
	if size > max {
		return nil, fmt.Errorf("section %s: %d bytes, over the cap of %d", s.Name, size, max)
	}
	cmf, flg := raw[hdr], raw[hdr+1]
	if cmf&0x0f != 8 || (uint16(cmf)<<8|uint16(flg))%31 != 0 || flg&0x20 != 0 {
		return nil, fmt.Errorf("section %s: bad zlib header", s.Name)
	}
	out := make([]byte, size)
	zr := flate.NewReader(bytes.NewReader(raw[hdr+2:]))
	if _, err := io.ReadFull(zr, out); err != nil {
		return nil, fmt.Errorf("inflate section %s: %w", s.Name, err)
	}
	return out, nil
}

// compressionHeader decodes the Elf32_Chdr or Elf64_Chdr at the start
// of raw: the compression type, the uncompressed size (bytes) and the
// header's size; type 0 when raw is too short.
func compressionHeader(f *elf.File, raw []byte) (typ uint32, size uint64, hdr int) {
	bo := f.ByteOrder
	if f.Class == elf.ELFCLASS64 {
		if len(raw) < 24 {
			return 0, 0, 0
		}
		return bo.Uint32(raw), bo.Uint64(raw[8:]), 24
	}
	if len(raw) < 12 {
		return 0, 0, 0
	}
	return bo.Uint32(raw), uint64(bo.Uint32(raw[4:])), 12
}
