package symbolize

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// kallsymsParser holds the state of one parse: the module-name intern
// table and the name arena that becomes Kallsyms.names.
type kallsymsParser struct {
	k       *Kallsyms
	modIdx  map[string]uint16
	arena   []byte
	nonzero bool
	sorted  bool
}

// kallsymsReadSize is the first read size for kallsyms (bytes), enough
// for most kernels' whole file in one buffer. Small reads make the
// kernel's kallsyms iterator slow: os.ReadFile's 512-byte first reads
// double the load time.
const kallsymsReadSize = 8 << 20

// readAll reads r to its end in large reads, starting with size bytes
// and doubling.
func readAll(r io.Reader, size int) ([]byte, error) {
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, cap(buf))
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// parseKallsyms parses the whole text of /proc/kallsyms (the real file
// has 100k–250k lines, 5–12 MB). It allocates only the symbol slice and
// the name arena, both sized from a first count of the lines, and one
// string per module.
func parseKallsyms(data []byte) (*Kallsyms, error) {
	lines := bytes.Count(data, []byte{'\n'}) + 1
	p := kallsymsParser{
		k:      &Kallsyms{modules: []string{""}, syms: make([]ksym, 0, lines)},
		modIdx: map[string]uint16{"": 0},
		// Each line holds at least 19 bytes besides its name.
		arena:  make([]byte, 0, max(len(data)-19*lines, 0)+64),
		sorted: true,
	}
	n := 0
	for lineNo := 1; len(data) > 0; lineNo++ {
		var line []byte
		line, data, _ = bytes.Cut(data, newline)
		if len(line) == 0 {
			continue
		}
		n++
		if err := p.line(line); err != nil {
			return nil, fmt.Errorf("line %d: %w", lineNo, err)
		}
	}
	if n == 0 {
		return nil, errNoKallsyms
	}
	return p.finish(), nil
}

// finish turns the parsed lines into the final table.
func (p *kallsymsParser) finish() *Kallsyms {
	k := p.k
	if !p.nonzero {
		// Every address is zero: nothing can be looked up.
		k.hidden = true
		k.syms = nil
		k.text, k.init = addrRange{}, addrRange{}
		return k
	}
	k.names = string(p.arena)
	if !p.sorted {
		k.sortSyms()
	} else {
		k.dedup()
	}
	return k
}

// line parses one non-empty line: "<hex addr> <type> <name>[\t[<module>]]".
func (p *kallsymsParser) line(line []byte) error {
	addr, n, ok := parseHex(line)
	if !ok || len(line) < n+4 || line[n] != ' ' || line[n+2] != ' ' {
		return fmt.Errorf("malformed line %q", line)
	}
	typ, name := line[n+1], line[n+3:]
	var mod []byte
	if t := bytes.IndexByte(name, '\t'); t >= 0 {
		name, mod = name[:t], bytes.TrimSpace(name[t+1:])
		mod = bytes.TrimSuffix(bytes.TrimPrefix(mod, []byte{'['}), []byte{']'})
	}
	if len(name) == 0 || len(name) > 0xffff {
		return fmt.Errorf("malformed symbol name in %q", line)
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
	p.add(addr, name, p.module(mod), typ >= 'A' && typ <= 'Z')
	return nil
}

// add appends one symbol.
func (p *kallsymsParser) add(addr uint64, name []byte, mod uint16, global bool) {
	syms := p.k.syms
	if n := len(syms); n > 0 && syms[n-1].addr > addr {
		p.sorted = false
	}
	p.k.syms = append(syms, ksym{
		addr:   addr,
		name:   uint32(len(p.arena)),
		nlen:   uint16(len(name)),
		mod:    mod,
		global: global,
	})
	p.arena = append(p.arena, name...)
}

// module returns the index of module name, adding it on first sight.
func (p *kallsymsParser) module(name []byte) uint16 {
	if len(name) == 0 {
		return 0
	}
	if i, ok := p.modIdx[string(name)]; ok { // no allocation
		return i
	}
	i := uint16(len(p.k.modules))
	s := string(name)
	p.k.modules = append(p.k.modules, s)
	p.modIdx[s] = i
	return i
}

// marker records the section markers of the kernel image and reports
// whether name is one; markers are not kept as symbols.
func (p *kallsymsParser) marker(name []byte, addr uint64) bool {
	k := p.k
	switch string(name) {
	case "_text", "_stext":
		if k.text.start == 0 || addr < k.text.start {
			k.text.start = addr
		}
	case "_etext":
		k.text.end = addr
	case "_sinittext":
		k.init.start = addr
	case "_einittext":
		k.init.end = addr
	default:
		return false
	}
	return true
}

// dedup drops later symbols at an address already taken, keeping a global
// name over a local one (the input is sorted).
func (k *Kallsyms) dedup() {
	out := k.syms[:0]
	for _, s := range k.syms {
		if n := len(out); n > 0 && out[n-1].addr == s.addr {
			if !out[n-1].global && s.global {
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

// parseHex parses the leading hex digits of b (at most 16) and returns the
// value and how many bytes it used; ok is false when there are none or too
// many.
func parseHex(b []byte) (v uint64, n int, ok bool) {
	for n < len(b) {
		c := b[n]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return v, n, n > 0 && n <= 16
		}
		v = v<<4 | uint64(c)
		n++
	}
	return v, n, n > 0 && n <= 16
}

// LoadModules reads module extents from a file in /proc/modules format
// (lines of "ext4 1089536 2 - Live 0xffffffffc0a00000") so that the last
// symbol of each module ends at the module's end rather than up to 1 MiB
// later. The extent is [address, address+size) in bytes; since Linux 6.4
// it spans the module's text and data, so it bounds rather than equals the
// text. Modules that kallsyms does not list, and lines with a zero address
// (kptr_restrict), are ignored. It returns an error only when the file
// cannot be read; malformed lines are skipped.
func (k *Kallsyms) LoadModules(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open modules: %w", err)
	}
	defer f.Close()
	idx := make(map[string]uint16, len(k.modules))
	for i, m := range k.modules {
		idx[m] = uint16(i)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, r, ok := parseModuleLine(sc.Text())
		if i, known := idx[name]; ok && known && i != 0 {
			if k.modEnd == nil {
				k.modEnd = make(map[uint16]addrRange)
			}
			k.modEnd[i] = r
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read modules: %w", err)
	}
	return nil
}

// parseModuleLine parses one /proc/modules line into the module's name
// and extent.
func parseModuleLine(line string) (name string, r addrRange, ok bool) {
	f := strings.Fields(line)
	if len(f) < 6 {
		return "", addrRange{}, false
	}
	size, err1 := strconv.ParseUint(f[1], 10, 64)
	addr, err2 := strconv.ParseUint(strings.TrimPrefix(f[5], "0x"), 16, 64)
	if err1 != nil || err2 != nil || addr == 0 {
		return "", addrRange{}, false
	}
	return f[0], addrRange{addr, addr + size}, true
}
