package ksym

import (
	"encoding/binary"
	"fmt"
	"io"
	"unsafe"

	"github.com/gprofile/gprofile/internal/symbolize/kallsyms"
)

// Layout of one kallsyms iterator record, as bpf/ksym.bpf.c writes it
// (struct ksym_record, which bpf2go generated as ksymKsymRecord): a
// header, then the name, then the module name, neither NUL-terminated;
// integers little-endian.
const (
	ksymRecValue     = int(unsafe.Offsetof(ksymKsymRecord{}.Value))     // u64 address, 0 when hidden
	ksymRecNameLen   = int(unsafe.Offsetof(ksymKsymRecord{}.NameLen))   // u16 name bytes, 1..ksymRecMaxName
	ksymRecType      = int(unsafe.Offsetof(ksymKsymRecord{}.Type))      // u8 type letter, as /proc/kallsyms prints it
	ksymRecModuleLen = int(unsafe.Offsetof(ksymKsymRecord{}.ModuleLen)) // u8 module name bytes, 0..ksymRecMaxModule
	ksymRecHeader    = int(unsafe.Offsetof(ksymKsymRecord{}.Name))
	ksymRecMaxName   = len(ksymKsymRecord{}.Name)   // KSYM_NAME_LEN
	ksymRecMaxModule = len(ksymKsymRecord{}.Module) // MODULE_NAME_LEN on 64-bit kernels
)

// ParseIter parses the binary records of the BPF kallsyms iterator
// ([OpenIter]) into the table [kallsyms.Parse] makes of /proc/kallsyms
// text with the same symbols: the same symbols kept (text symbols, BPF
// programs), the same names, addresses, modules and section bounds, and
// Hidden when every address is zero. It returns an error when reading
// fails, when a record is malformed (a name of 0 or more than 512 bytes,
// a module name over 56 bytes) or cut short by the end of the stream (it
// names the record, counted from 1), or when there are no records. r is
// read on a goroutine of its own, in 64 KiB reads, while the calling
// goroutine parses; it is never read after ParseIter returns.
func ParseIter(r io.Reader) (*kallsyms.Table, error) {
	return parseIter(r, kallsyms.Chunk)
}

// parseIter is ParseIter with chunk-byte reads.
func parseIter(r io.Reader, chunk int) (*kallsyms.Table, error) {
	p := &ksymRecParser{b: kallsyms.NewBuilder()}
	if err := kallsyms.ReadChunks(r, chunk, p.feed); err != nil {
		return nil, err
	}
	return p.finish()
}

// ksymRecParser splits iterator records out of the chunks of a stream and
// hands each symbol to a kallsyms.Builder. A record may span chunks.
type ksymRecParser struct {
	b     *kallsyms.Builder
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
	nlen := int(binary.LittleEndian.Uint16(rec[ksymRecNameLen:]))
	name := rec[ksymRecHeader : ksymRecHeader+nlen]
	mod := rec[ksymRecHeader+nlen:]
	addr := binary.LittleEndian.Uint64(rec[ksymRecValue:])
	if err := rp.b.Add(addr, rec[ksymRecType], name, mod); err != nil {
		return fmt.Errorf("kallsyms iterator record %d: %w", rp.n, err)
	}
	return nil
}

// finish fails on a record cut short, then makes the table.
func (rp *ksymRecParser) finish() (*kallsyms.Table, error) {
	if len(rp.carry) > 0 {
		return nil, fmt.Errorf("kallsyms iterator record %d: cut short at %d bytes", rp.n+1, len(rp.carry))
	}
	return rp.b.Table()
}

// LoadIter lists the kernel's symbols through the BPF kallsyms iterator:
// [OpenIter], then [ParseIter]; its error is the first of either. It is
// what symbolize.Options.KallsymsIter wants.
func LoadIter() (*kallsyms.Table, error) { return loadIter(OpenIter) }

// loadIter opens the iterator stream with open, parses it and closes it.
func loadIter(open func() (io.ReadCloser, error)) (*kallsyms.Table, error) {
	r, err := open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return ParseIter(r)
}
