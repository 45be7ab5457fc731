package kallsyms

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Layout of one kallsyms iterator record (attach.OpenKallsymsIter, which
// bpf/ksym.bpf.c writes; this package does not import attach, so the
// layout is repeated here): a 12-byte header, then the name, then the
// module name, neither NUL-terminated; integers little-endian.
const (
	ksymRecValue     = 0  // u64 address, 0 when hidden
	ksymRecNameLen   = 8  // u16 name bytes, 1..ksymRecMaxName
	ksymRecType      = 10 // u8 type letter, as /proc/kallsyms prints it
	ksymRecModuleLen = 11 // u8 module name bytes, 0..ksymRecMaxModule
	ksymRecHeader    = 12
	ksymRecMaxName   = 512 // KSYM_NAME_LEN
	ksymRecMaxModule = 56  // MODULE_NAME_LEN on 64-bit kernels
)

// ParseIter parses the binary records of the BPF kallsyms
// iterator (attach.OpenKallsymsIter; layout in the ksymRec* constants)
// into the same table ParseKallsyms makes of /proc/kallsyms text with the
// same symbols: the same symbols kept (text symbols, BPF programs), the
// same names, addresses, modules and section bounds, and Hidden when
// every address is zero. It returns an error when reading fails, when a
// record is malformed (a name of 0 or more than 512 bytes, a module name
// over 56 bytes) or cut short by the end of the stream (it names the
// record, counted from 1), or when there are no records. r is read on a
// goroutine of its own, in 64 KiB reads, while the calling goroutine
// parses; it is never read after ParseIter returns.
func ParseIter(r io.Reader) (*Table, error) {
	return loadKallsymsIter(r, kallsymsChunk)
}

// loadKallsymsIter is ParseIter with chunk-byte reads.
func loadKallsymsIter(r io.Reader, chunk int) (*Table, error) {
	p := &ksymRecParser{p: newKallsymsParser(kallsymsSizes(nil, false))}
	if err := readChunks(r, chunk, p.feed); err != nil {
		return nil, err
	}
	return p.finish()
}

// ksymRecParser splits iterator records out of the chunks of a stream and
// hands each symbol to a kallsymsParser. A record may span chunks.
type ksymRecParser struct {
	p     *kallsymsParser
	carry []byte // the start of a record that the next chunk ends
	n     int    // records parsed
}

// feed parses the complete records of chunk, the next bytes of the
// stream, and keeps a final partial record for the next call.
func (rp *ksymRecParser) feed(chunk []byte) error {
	for len(rp.carry) > 0 {
		need := ksymRecHeader
		if len(rp.carry) >= ksymRecHeader {
			var err error
			if need, err = rp.recordLen(rp.carry); err != nil {
				return err
			}
			if len(rp.carry) == need {
				if err := rp.record(rp.carry); err != nil {
					return err
				}
				rp.carry = rp.carry[:0]
				break
			}
		}
		if len(chunk) == 0 {
			return nil
		}
		take := min(need-len(rp.carry), len(chunk))
		rp.carry = append(rp.carry, chunk[:take]...)
		chunk = chunk[take:]
	}
	for len(chunk) >= ksymRecHeader {
		n, err := rp.recordLen(chunk)
		if err != nil {
			return err
		}
		if len(chunk) < n {
			break
		}
		if err := rp.record(chunk[:n]); err != nil {
			return err
		}
		chunk = chunk[n:]
	}
	rp.carry = append(rp.carry, chunk...)
	return nil
}

// recordLen returns the length in bytes of the record whose header h
// starts with, or an error for a header out of bounds.
func (rp *ksymRecParser) recordLen(h []byte) (int, error) {
	name := int(binary.LittleEndian.Uint16(h[ksymRecNameLen:]))
	mod := int(h[ksymRecModuleLen])
	if name == 0 || name > ksymRecMaxName || mod > ksymRecMaxModule {
		return 0, fmt.Errorf("kallsyms iterator record %d: malformed header % x (name %d bytes, module %d bytes)",
			rp.n+1, h[:ksymRecHeader], name, mod)
	}
	return ksymRecHeader + name + mod, nil
}

// record parses one whole record, counting it.
func (rp *ksymRecParser) record(rec []byte) error {
	rp.n++
	rp.p.lines++
	nlen := int(binary.LittleEndian.Uint16(rec[ksymRecNameLen:]))
	name := rec[ksymRecHeader : ksymRecHeader+nlen]
	mod := rec[ksymRecHeader+nlen:]
	addr := binary.LittleEndian.Uint64(rec[ksymRecValue:])
	if err := rp.p.symbol(addr, rec[ksymRecType], name, mod); err != nil {
		return fmt.Errorf("kallsyms iterator record %d: %w", rp.n, err)
	}
	return nil
}

// finish fails on a record cut short, then makes the table.
func (rp *ksymRecParser) finish() (*Table, error) {
	if len(rp.carry) > 0 {
		return nil, fmt.Errorf("kallsyms iterator record %d: cut short at %d bytes", rp.n+1, len(rp.carry))
	}
	return rp.p.finish()
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
