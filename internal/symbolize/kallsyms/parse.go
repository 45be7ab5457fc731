package kallsyms

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/gprofile/gprofile/internal/symbolize/internal/textscan"
)

// kallsymsParser holds the state of one parse: the module-name intern
// table and the name arena that becomes Kallsyms.names. It is fed the
// file in chunks as they are read (feed), so a line may span two chunks.
type kallsymsParser struct {
	k       *Table
	modIdx  map[string]uint16
	lastMod []byte // name of modules[lastIdx], to skip the map on runs
	lastIdx uint16
	arena   strings.Builder // names; its String is Kallsyms.names
	carry   []byte          // the start of a line that the next chunk ends
	lineNo  int             // lines seen, empty ones too
	lines   int             // non-empty lines seen
	nonzero bool
	sorted  bool
	tail    int // with !sorted: syms[:tail] is sorted, syms[tail-1] > syms[tail]
}

// maxKallsymsLine is the longest line accepted (bytes); the kernel's
// lines are under 600 bytes.
const maxKallsymsLine = 64 << 10

// newKallsymsParser returns a parser whose table starts with room for
// syms functions and names bytes of names; both grow as needed.
func newKallsymsParser(syms, names int) *kallsymsParser {
	p := &kallsymsParser{
		k:      &Table{modules: []string{""}, syms: make([]ksym, 0, syms)},
		modIdx: map[string]uint16{"": 0},
		sorted: true,
	}
	p.arena.Grow(names)
	return p
}

// kallsymsSizes returns the room newKallsymsParser should make for a file
// that starts with first (and that ends there when whole): a kernel with
// 128k functions and 2 MiB of names when not whole (the typical kernel:
// 120k-250k lines, half of them __pfx_ symbols that take no names room);
// for a whole file, its lines, and its bytes less 20 per line.
func kallsymsSizes(first []byte, whole bool) (syms, names int) {
	if !whole {
		return 1 << 17, 2 << 20
	}
	lines := bytes.Count(first, textscan.Newline) + 1
	return lines, max(len(first)-20*lines, 0) + 64
}

// parseKallsyms parses the whole text of /proc/kallsyms at once.
func parseKallsyms(data []byte) (*Table, error) {
	p := newKallsymsParser(kallsymsSizes(data, true))
	if err := p.feed(data); err != nil {
		return nil, err
	}
	return p.finish()
}

// feed parses the complete lines of chunk, the next bytes of the file,
// and keeps a final partial line for the next call (or finish). It
// allocates nothing but the growth of the table and arena.
func (p *kallsymsParser) feed(chunk []byte) error {
	if len(p.carry) > 0 {
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			return p.keep(chunk)
		}
		p.carry = append(p.carry, chunk[:i]...)
		if err := p.parseLine(p.carry); err != nil {
			return err
		}
		p.carry = p.carry[:0]
		chunk = chunk[i+1:]
	}
	for {
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			return p.keep(chunk)
		}
		if err := p.parseLine(chunk[:i]); err != nil {
			return err
		}
		chunk = chunk[i+1:]
	}
}

// keep appends b, the start of a line, to the carried partial line.
func (p *kallsymsParser) keep(b []byte) error {
	if len(p.carry)+len(b) > maxKallsymsLine {
		return fmt.Errorf("line %d: longer than %d bytes", p.lineNo+1, maxKallsymsLine)
	}
	p.carry = append(p.carry, b...)
	return nil
}

// parseLine parses one line, without its newline, counting it.
func (p *kallsymsParser) parseLine(line []byte) error {
	p.lineNo++
	if len(line) == 0 {
		return nil
	}
	p.lines++
	if err := p.line(line); err != nil {
		return fmt.Errorf("line %d: %w", p.lineNo, err)
	}
	return nil
}

// finish parses a last line without a newline and turns the parsed
// lines into the final table, trimmed to its size.
func (p *kallsymsParser) finish() (*Table, error) {
	if len(p.carry) > 0 {
		if err := p.parseLine(p.carry); err != nil {
			return nil, err
		}
	}
	if p.lines == 0 {
		return nil, errNoKallsyms
	}
	k := p.k
	if !p.nonzero {
		// Every address is zero: nothing can be looked up.
		k.hidden = true
		k.syms = nil
		k.text, k.init = AddrRange{}, AddrRange{}
		return k, nil
	}
	k.names = p.arena.String() // no copy
	if !p.sorted {
		k.sortTail(p.tail)
	}
	if cap(k.syms)-len(k.syms) > len(k.syms)/4 {
		k.syms = slices.Clone(k.syms)
	}
	return k, nil
}

// line parses one non-empty line: "<hex addr> <type> <name>[\t[<module>]]".
func (p *kallsymsParser) line(line []byte) error {
	addr, n, ok := textscan.ParseHex(line)
	if !ok || len(line) < n+4 || line[n] != ' ' || line[n+2] != ' ' {
		return fmt.Errorf("malformed line %.100q", line)
	}
	typ, name := line[n+1], line[n+3:]
	var mod []byte
	if t := bytes.IndexByte(name, '\t'); t >= 0 {
		name, mod = name[:t], bytes.TrimSpace(name[t+1:])
		mod = bytes.TrimSuffix(bytes.TrimPrefix(mod, []byte{'['}), []byte{']'})
	}
	if err := p.symbol(addr, typ, name, mod); err != nil {
		return fmt.Errorf("%w in %.100q", err, line)
	}
	return nil
}

// add appends one symbol. A symbol at the address of the one before it
// replaces it only if it is global and that one is not (the kernel lists
// the aliases of an address together), as dedup does for files out of
// order.
func (p *kallsymsParser) add(addr uint64, name []byte, mod uint16, global bool) {
	s := ksym{addr: addr, name: uint32(p.arena.Len()), nlen: uint16(len(name)), mod: mod}
	if global {
		s.nlen |= ksymGlobal
	}
	n := len(p.k.syms)
	if n == 0 {
		p.k.syms = append(p.k.syms, s)
		p.arena.Write(name)
		return
	}
	last := &p.k.syms[n-1]
	replace := false
	switch {
	case last.addr > addr:
		if p.sorted {
			p.sorted, p.tail = false, n
		}
	case last.addr == addr && p.sorted:
		if last.global() || !global {
			return
		}
		replace = true
	}
	// "abort" after "__pfx_abort": point into the previous name. (String
	// does not copy; the comparison does not allocate.)
	prev := p.arena.String()[last.name : last.name+uint32(last.nlen&ksymNameMask)]
	if len(prev) >= len(name) && prev[len(prev)-len(name):] == string(name) {
		s.name = last.name + uint32(len(prev)-len(name))
	} else {
		p.arena.Write(name)
	}
	if replace {
		*last = s
	} else {
		p.k.syms = append(p.k.syms, s)
	}
}

// module returns the index of module name, adding it on first sight. It
// fails past 65535 modules.
func (p *kallsymsParser) module(name []byte) (uint16, error) {
	switch {
	case len(name) == 0:
		return 0, nil
	case bytes.Equal(name, p.lastMod):
		return p.lastIdx, nil
	}
	i, ok := p.modIdx[string(name)] // no allocation
	if !ok {
		if len(p.k.modules) > 0xffff {
			return 0, fmt.Errorf("more than %d modules", 0xffff)
		}
		i = uint16(len(p.k.modules))
		s := string(name)
		p.k.modules = append(p.k.modules, s)
		p.modIdx[s] = i
	}
	p.lastMod = append(p.lastMod[:0], name...)
	p.lastIdx = i
	return i, nil
}

// marker records the section markers of the kernel image and reports
// whether name is one; markers are not kept as symbols.
func (p *kallsymsParser) marker(name []byte, addr uint64) bool {
	k := p.k
	switch string(name) {
	case "_text", "_stext":
		if k.text.Start == 0 || addr < k.text.Start {
			k.text.Start = addr
		}
	case "_etext":
		k.text.End = addr
	case "_sinittext":
		k.init.Start = addr
	case "_einittext":
		k.init.End = addr
	default:
		return false
	}
	return true
}

// dedup drops later symbols at an address already taken, keeping a global
// name over a local one (the input is sorted).
func (k *Table) dedup() {
	out := k.syms[:0]
	for _, s := range k.syms {
		if n := len(out); n > 0 && out[n-1].addr == s.addr {
			if !out[n-1].global() && s.global() {
				out[n-1] = s
			}
			continue
		}
		out = append(out, s)
	}
	k.syms = out
}

// isKernelText reports a kallsyms type letter of code: t/T (text) and w/W
// (weak, in the kernel always functions).
func isKernelText(typ byte) bool {
	return typ == 't' || typ == 'T' || typ == 'w' || typ == 'W'
}

// symbol adds one kallsyms entry, address, type letter, name and module
// name (without brackets; empty for the kernel image), to the table:
// section markers set the text ranges, text symbols and BPF programs are
// kept, the rest dropped. Both sources, the text of /proc/kallsyms (line)
// and the iterator's records, go through it, so that they keep the same
// symbols.
func (p *kallsymsParser) symbol(addr uint64, typ byte, name, mod []byte) error {
	if len(name) == 0 || len(name) > ksymNameMask {
		return fmt.Errorf("malformed symbol name (%d bytes; 1 to %d allowed)", len(name), ksymNameMask)
	}
	if p.arena.Len() > math.MaxUint32-len(name) {
		return errors.New("symbol names over 4 GiB")
	}
	if addr != 0 {
		p.nonzero = true
	}
	if len(mod) == 0 && p.marker(name, addr) {
		return nil
	}
	if !isKernelText(typ) && !(len(mod) > 0 && bytes.HasPrefix(name, []byte("bpf_prog_"))) {
		return nil
	}
	m, err := p.module(mod)
	if err != nil {
		return err
	}
	p.add(addr, name, m, typ >= 'A' && typ <= 'Z')
	return nil
}

// Builder makes a [Table] of kallsyms entries given one at a time, as a
// source other than the text of /proc/kallsyms gives them (the BPF
// kallsyms iterator's records, decoded by package ksym). It keeps the
// symbols that [Parse] keeps of the same entries.
type Builder struct{ p *kallsymsParser }

// NewBuilder returns a Builder with room for a typical kernel's symbols.
func NewBuilder() *Builder { return &Builder{p: newKallsymsParser(kallsymsSizes(nil, false))} }

// Add adds one entry: address, type letter as /proc/kallsyms prints it,
// name and module name (without brackets; empty for the kernel image).
// Neither slice is kept. It fails on a name of 0 or more than 512 bytes,
// or past 4 GiB of names.
func (b *Builder) Add(addr uint64, typ byte, name, mod []byte) error {
	b.p.lines++
	return b.p.symbol(addr, typ, name, mod)
}

// Table returns the table of the entries added, or an error when there
// were none.
func (b *Builder) Table() (*Table, error) { return b.p.finish() }

// Chunk is the size of the reads [ReadChunks] makes for [Load] (bytes).
const Chunk = kallsymsChunk

// ReadChunks reads r in chunk-byte buffers on a goroutine of its own
// while the calling goroutine hands each buffer, as it arrives, to feed,
// which must not keep it (see [Load]). It returns the first feed error as
// it is, or the first read error wrapped; io.EOF ends the read.
func ReadChunks(r io.Reader, chunk int, feed func([]byte) error) error {
	return readChunks(r, chunk, feed)
}
