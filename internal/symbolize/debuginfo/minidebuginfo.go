package debuginfo

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/gprofile/gprofile/internal/symbolize/elfio"

	"github.com/ulikunitz/xz"
	"github.com/ulikunitz/xz/lzma"
)

// maxMiniDebugInfo caps the decompressed size of a .gnu_debugdata
// section (bytes). Fedora's MiniDebugInfo is a few hundred KiB.
const maxMiniDebugInfo = 64 << 20

// maxXZDict caps the LZMA2 dictionary an xz stream may ask the decoder to
// allocate (bytes): 64 MiB, what xz -9 uses.
const maxXZDict = 64 << 20

// MiniDebugInfo returns the ELF file embedded, xz-compressed, in f's
// .gnu_debugdata section (MiniDebugInfo, as Fedora ships it: a .symtab of
// the local functions that .dynsym lacks), or nil when f has none or it
// is corrupt, larger than maxMiniDebugInfo, or not a single xz stream.
func MiniDebugInfo(f *elf.File, lr *elfio.ReaderAt) (ef *elf.File) {
	defer func() {
		if recover() != nil {
			ef = nil // debug/elf or the decoder panicked on corrupt input
		}
	}()
	sec := f.Section(".gnu_debugdata")
	if sec == nil || sec.Type == elf.SHT_NOBITS || sec.Size > maxMiniDebugInfo {
		return nil
	}
	data, err := elfio.SectionData(lr, sec, maxMiniDebugInfo)
	if err != nil {
		return nil
	}
	plain, err := Unxz(data, maxMiniDebugInfo)
	if err != nil {
		return nil
	}
	ef, err = elf.NewFile(bytes.NewReader(plain))
	if err != nil || ef.Class != f.Class || ef.Machine != f.Machine {
		return nil
	}
	return ef
}

// Unxz decompresses the single xz stream data, refusing before it
// decodes anything a stream whose index declares more than max bytes or
// whose LZMA2 dictionary is larger than maxXZDict.
func Unxz(data []byte, max int64) ([]byte, error) {
	if err := checkXZ(data, max); err != nil {
		return nil, err
	}
	r, err := xz.ReaderConfig{DictCap: 1 << 20, SingleStream: true}.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("read xz header: %w", err)
	}
	out, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, fmt.Errorf("decompress xz: %w", err)
	}
	if int64(len(out)) > max {
		return nil, errXZTooLarge
	}
	return out, nil
}

var errXZTooLarge = errors.New("xz stream too large")

// checkXZ walks the index at the end of the xz stream data (format
// 1.0.4, sections 2.1.2 and 4) and every block header it locates: the
// blocks must tile the stream up to the index, their uncompressed sizes
// must add up to at most max bytes, and each LZMA2 dictionary must be at
// most maxXZDict bytes.
func checkXZ(data []byte, max int64) error {
	n := len(data)
	if n < 32 || string(data[n-2:]) != "YZ" || !bytes.HasPrefix(data, []byte("\xfd7zXZ\x00")) {
		return errors.New("not a single xz stream")
	}
	checkSize := xzCheckSize(data[7] & 0x0f)
	indexSize := (int(binary.LittleEndian.Uint32(data[n-8:])) + 1) * 4
	indexStart := n - 12 - indexSize
	if indexStart < 12 || data[indexStart] != 0 {
		return errors.New("bad xz index")
	}
	b := xzBuf{data: data[indexStart+1 : n-12]}
	records := b.uvarint()
	pos, total := uint64(12), uint64(0)
	for i := uint64(0); i < records && b.err == nil; i++ {
		unpadded, size := b.uvarint(), b.uvarint()
		total += size
		if total > uint64(max) || unpadded > uint64(n) || pos+unpadded > uint64(indexStart) {
			return errXZTooLarge
		}
		if err := checkXZBlock(data[pos:pos+unpadded], checkSize); err != nil {
			return err
		}
		pos += elfio.Align4(unpadded)
	}
	if b.err != nil || pos != uint64(indexStart) {
		return errors.New("bad xz index")
	}
	return nil
}

// checkXZBlock checks the header of one block (data is the block, header
// first, without padding): its filters must be LZMA2 alone, with a
// dictionary of at most maxXZDict bytes.
func checkXZBlock(block []byte, checkSize int) error {
	if len(block) < 1+checkSize {
		return errors.New("bad xz block")
	}
	hsize := (int(block[0]) + 1) * 4
	if block[0] == 0 || hsize > len(block) {
		return errors.New("bad xz block header")
	}
	b := xzBuf{data: block[1:hsize]}
	flags := b.byte()
	if flags&0x3 != 0 {
		return errors.New("xz filter chain not supported")
	}
	if flags&0x40 != 0 {
		b.uvarint() // compressed size
	}
	if flags&0x80 != 0 {
		b.uvarint() // uncompressed size
	}
	id, propSize := b.uvarint(), b.uvarint()
	code := b.byte()
	if b.err != nil || id != 0x21 || propSize != 1 {
		return errors.New("xz filter not LZMA2")
	}
	dict, err := lzma.DecodeDictCap(code)
	if err != nil || dict > maxXZDict {
		return errXZTooLarge
	}
	return nil
}

// xzCheckSize returns the size of the integrity check of check type t
// (bytes).
func xzCheckSize(t byte) int {
	if t == 0 {
		return 0
	}
	return 4 << ((t - 1) / 3)
}

// xzBuf reads the fields of xz headers and indexes.
type xzBuf struct {
	data []byte
	err  error
}

var errXZShort = errors.New("xz header too short")

// byte reads one byte.
func (b *xzBuf) byte() byte {
	if len(b.data) == 0 {
		b.err = errXZShort
		return 0
	}
	c := b.data[0]
	b.data = b.data[1:]
	return c
}

// uvarint reads a multibyte integer: 7 bits a byte, low bits first, at
// most 9 bytes.
func (b *xzBuf) uvarint() uint64 {
	v, n := binary.Uvarint(b.data)
	if n <= 0 || n > 9 {
		b.err = errXZShort
		return 0
	}
	b.data = b.data[n:]
	return v
}
