package probe

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Note is one USDT probe site: a note of .note.stapsdt.
type Note struct {
	// Provider and Name are the probe's provider and name
	// (DTRACE_PROBE(provider, name)).
	Provider, Name string
	// Args is the argument format string ("-4@%edi 8@%rsi"), as written.
	Args string
	// PC is the probe site's virtual address, adjusted by where
	// .stapsdt.base is against the base the note recorded (prelink).
	PC uint64
	// Offset is PC as a byte offset in the file, what a uprobe attaches to.
	Offset uint64
	// Semaphore is the virtual address of the probe's semaphore (a
	// 16-bit counter the program tests before it prepares the probe's
	// arguments), 0 for none.
	Semaphore uint64
	// SemaphoreOffset is Semaphore as a byte offset in the file: the
	// uprobe's ref_ctr_offset, which the kernel increments while a probe
	// is attached. 0 for none.
	SemaphoreOffset uint64
}

// ntStapsdt is the note type of SystemTap's SDT notes.
const ntStapsdt = 3

// ErrNoNotes is wrapped by Notes when the file has no .note.stapsdt
// section: it was built without USDT probes (sys/sdt.h).
var ErrNoNotes = errors.New("no USDT probes (no .note.stapsdt section)")

// Notes reads the USDT probes of the ELF file r from its .note.stapsdt
// section, in file order. A note whose PC lies in no executable segment
// keeps Offset 0; one that is cut short or malformed is an error (the
// section is corrupt).
func Notes(r io.ReaderAt) ([]Note, error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("read ELF: %w", err)
	}
	defer f.Close()
	sec := f.Section(".note.stapsdt")
	if sec == nil || sec.Type != elf.SHT_NOTE {
		return nil, ErrNoNotes
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("read .note.stapsdt: %w", err)
	}
	var base uint64
	if b := f.Section(".stapsdt.base"); b != nil {
		base = b.Addr
	}
	addrSize := 8
	if f.Class == elf.ELFCLASS32 {
		addrSize = 4
	}
	notes, err := parseNotes(data, f.ByteOrder, addrSize)
	if err != nil {
		return nil, err
	}
	for i := range notes {
		n := &notes[i]
		n.PC = adjustPC(n.PC, n.base, base)
		n.Offset, _ = fileOffset(f, n.PC, elf.PF_X)
		if n.Semaphore != 0 {
			n.SemaphoreOffset, _ = fileOffset(f, n.Semaphore, 0)
		}
	}
	out := make([]Note, len(notes))
	for i, n := range notes {
		out[i] = n.Note
	}
	return out, nil
}

// adjustPC moves pc by how far the .stapsdt.base section (at base) is
// from where the note says it was (noteBase), as libbpf and bcc do: a
// prelinked file moved its sections after the notes were written.
func adjustPC(pc, noteBase, base uint64) uint64 {
	if noteBase == 0 || base == 0 {
		return pc
	}
	return pc + base - noteBase
}

// rawNote is a Note with the base address its note recorded.
type rawNote struct {
	Note
	base uint64
}

// parseNotes decodes the notes of a .note.stapsdt section: namesz,
// descsz, type (4 bytes each), the name "stapsdt" padded to 4 bytes, then
// the descriptor: pc, base and semaphore (addrSize bytes each) and three
// NUL-terminated strings (provider, name, arguments), padded to 4 bytes.
// Notes of another name or type are skipped.
func parseNotes(data []byte, bo binary.ByteOrder, addrSize int) ([]rawNote, error) {
	var out []rawNote
	for off := 0; off < len(data); {
		if len(data)-off < 12 {
			return nil, fmt.Errorf(".note.stapsdt: note header cut at byte %d", off)
		}
		namesz, descsz, typ := bo.Uint32(data[off:]), bo.Uint32(data[off+4:]), bo.Uint32(data[off+8:])
		nameEnd := uint64(off) + 12 + uint64(namesz)
		descOff := align4(nameEnd)
		descEnd := descOff + uint64(descsz)
		if descEnd > uint64(len(data)) {
			return nil, fmt.Errorf(".note.stapsdt: note at byte %d runs past the section (%d bytes)", off, len(data))
		}
		name := string(bytes.TrimRight(data[off+12:nameEnd], "\x00"))
		desc := data[descOff:descEnd]
		off = int(align4(descEnd))
		if typ != ntStapsdt || name != "stapsdt" {
			continue
		}
		n, err := parseDesc(desc, bo, addrSize)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }

func parseDesc(d []byte, bo binary.ByteOrder, addrSize int) (rawNote, error) {
	if len(d) < 3*addrSize {
		return rawNote{}, fmt.Errorf(".note.stapsdt: descriptor of %d bytes, want at least %d", len(d), 3*addrSize)
	}
	addr := func(i int) uint64 {
		if addrSize == 4 {
			return uint64(bo.Uint32(d[i*4:]))
		}
		return bo.Uint64(d[i*8:])
	}
	var n rawNote
	n.PC, n.base, n.Semaphore = addr(0), addr(1), addr(2)
	strs := bytes.SplitN(d[3*addrSize:], []byte{0}, 4)
	if len(strs) < 4 {
		return rawNote{}, fmt.Errorf(".note.stapsdt: descriptor at pc %#x lacks its provider, name and arguments", n.PC)
	}
	n.Provider, n.Name, n.Args = string(strs[0]), string(strs[1]), string(strs[2])
	if n.Provider == "" || n.Name == "" {
		return rawNote{}, fmt.Errorf(".note.stapsdt: probe at pc %#x has an empty provider or name", n.PC)
	}
	return n, nil
}
