package objfile

import (
	"encoding/binary"
	"errors"
	"runtime/debug"
	"unsafe"

	"github.com/gprofile/gprofile/internal/symbolize/dwarfline"
	"github.com/gprofile/gprofile/internal/symbolize/elfio"
)

// symbolsMagic starts an encoded symbol table.
const symbolsMagic = "gpsyms02"

// Bounds of a symbol table read back from the section cache: symbols,
// and encoded bytes.
const (
	maxCachedSymbols = 1 << 24
	maxSymbolsBytes  = 512 << 20
)

// symbolsName names a binary's symbol table in the section cache. What
// Load reads depends on whether a separate debug file was found (a
// stripped binary's .symtab comes from it), so each case has its own
// entry: a debug file installed later is read, not hidden by the cache.
// The number changes whenever what readSymbols keeps, or the encoding,
// may change.
func symbolsName(withDebugFile bool) string {
	if withDebugFile {
		return "symbols-2-debug"
	}
	return "symbols-2"
}

// loadSymbols sets b.syms and b.names from the table an earlier run kept
// in cache under name for b's build ID, and b.debugFile to debugPath
// when that table came from the debug file, and reports whether it did;
// a missing or bad entry changes nothing. Reading back the sorted table
// skips reading, ranking and sorting the ELF symbol tables
// (BenchmarkSymbolCache). The table is used in place, in the entry's
// mapping (b.symMap), where the host's layout allows (symbolsInPlace):
// its pages are read as lookups touch them, not copied into the heap.
func (b *Binary) loadSymbols(cache *dwarfline.SectionCache, name, debugPath string) (ok bool) {
	m := cache.Map(b.buildID, name, maxSymbolsBytes)
	if m == nil {
		return false
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true)) // the entry's file may shrink
	defer func() {
		if elfio.RecoverFault(recover()) {
			ok = false
		}
	}()
	syms, names, fromDebug, err := parseSymbols(m.Data, symbolsInPlace)
	if err != nil {
		return false
	}
	b.syms, b.names = syms, names
	if len(syms) > 0 && unsafe.Pointer(&syms[0]) == unsafe.Pointer(&m.Data[symbolsHead]) {
		b.symMap = m // in place
	}
	if fromDebug {
		b.debugFile = debugPath
	}
	return true
}

// saveSymbols keeps b's symbol table in cache under name for b's build
// ID. Failures are ignored: the entry is a cache.
func (b *Binary) saveSymbols(cache *dwarfline.SectionCache, name string) {
	if cache == nil || b.buildID == "" || len(b.syms) == 0 {
		return
	}
	cache.Put(b.buildID, name, encodeSymbols(b.syms, b.names, b.debugFile != ""))
}

// symbolsHead is the size of an encoded table's header: symbolsMagic,
// the number of symbols, the arena's length, flags and 4 zero bytes, so
// that the symbols that follow are 8-byte aligned in the section
// cache's mapping of the entry (its header is 32 bytes).
const symbolsHead = len(symbolsMagic) + 16

// symbolBytes is the encoded size of one symbol: start and end (8 bytes
// each), name offset and length (4 each), sized (1) and 7 zero bytes,
// elfSym's layout on a little-endian 64-bit host.
const symbolBytes = 32

// symbolsInPlace says that this host lays elfSym out as encoded: a
// mapped table is used as it is (parseSymbols).
var symbolsInPlace = unsafe.Sizeof(elfSym{}) == symbolBytes && unsafe.Offsetof(elfSym{}.end) == 8 &&
	unsafe.Offsetof(elfSym{}.name) == 16 && unsafe.Offsetof(elfSym{}.nlen) == 20 &&
	unsafe.Offsetof(elfSym{}.sized) == 24 && binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// encodeSymbols encodes a symbol table: symbolsMagic, the number of
// symbols, the length of the name arena and flags (1: the symbols came
// from the debug file; 4 bytes each), 4 zero bytes, each symbol
// (symbolBytes, little-endian) and the arena. The section cache adds a
// CRC-32C.
func encodeSymbols(syms []elfSym, names string, fromDebug bool) []byte {
	le := binary.LittleEndian
	out := make([]byte, 0, symbolsHead+len(syms)*symbolBytes+len(names))
	out = append(out, symbolsMagic...)
	out = le.AppendUint32(out, uint32(len(syms)))
	out = le.AppendUint32(out, uint32(len(names)))
	flags := uint32(0)
	if fromDebug {
		flags = 1
	}
	out = le.AppendUint32(out, flags)
	out = le.AppendUint32(out, 0)
	for _, s := range syms {
		out = le.AppendUint64(out, s.start)
		out = le.AppendUint64(out, s.end)
		out = le.AppendUint32(out, s.name)
		out = le.AppendUint32(out, s.nlen)
		sized := byte(0)
		if s.sized {
			sized = 1
		}
		out = append(out, sized, 0, 0, 0, 0, 0, 0, 0)
	}
	return append(out, names...)
}

// errBadSymbols is every decoding error of a cached symbol table.
var errBadSymbols = errors.New("bad cached symbol table")

// decodeSymbols decodes what encodeSymbols wrote into new memory,
// refusing a table whose sizes or flags do not add up, whose padding is
// not zero, whose names lie outside the arena or whose starts are not
// strictly increasing (Lookup's binary search needs them so); a bad
// input is an error, never a panic.
func decodeSymbols(data []byte) (syms []elfSym, names string, fromDebug bool, err error) {
	return parseSymbols(data, false)
}

// parseSymbols is decodeSymbols; with inPlace (symbolsInPlace only), the
// symbols and names it returns are data itself, which must then stay
// as it is while they are used, and data's symbols must be 8-byte
// aligned (else they are copied).
func parseSymbols(data []byte, inPlace bool) (syms []elfSym, names string, fromDebug bool, err error) {
	if len(data) < symbolsHead || string(data[:len(symbolsMagic)]) != symbolsMagic {
		return nil, "", false, errBadSymbols
	}
	le := binary.LittleEndian
	n, nn, flags := uint64(le.Uint32(data[8:])), uint64(le.Uint32(data[12:])), le.Uint32(data[16:])
	if n > maxCachedSymbols || flags > 1 || le.Uint32(data[20:]) != 0 || uint64(len(data)-symbolsHead) != n*symbolBytes+nn {
		return nil, "", false, errBadSymbols
	}
	d := data[symbolsHead:]
	var prev uint64
	for i := range n {
		r := d[i*symbolBytes : (i+1)*symbolBytes]
		start, name, nlen := le.Uint64(r), le.Uint32(r[16:]), le.Uint32(r[20:])
		if r[24] > 1 || le.Uint64(r[24:])>>8 != 0 || uint64(name)+uint64(nlen) > nn || (i > 0 && start <= prev) {
			return nil, "", false, errBadSymbols
		}
		prev = start
	}
	arena := d[n*symbolBytes:]
	if inPlace && n > 0 && uintptr(unsafe.Pointer(&d[0]))%8 == 0 {
		syms = unsafe.Slice((*elfSym)(unsafe.Pointer(&d[0])), n)
		if nn > 0 {
			names = unsafe.String(&arena[0], nn)
		}
		return syms, names, flags == 1, nil
	}
	syms = make([]elfSym, n)
	for i := range syms {
		r := d[i*symbolBytes:]
		syms[i] = elfSym{start: le.Uint64(r), end: le.Uint64(r[8:]), name: le.Uint32(r[16:]), nlen: le.Uint32(r[20:]), sized: r[24] == 1}
	}
	return syms, string(arena), flags == 1, nil
}
