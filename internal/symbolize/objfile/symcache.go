package objfile

import (
	"encoding/binary"
	"errors"

	"github.com/gprofile/gprofile/internal/symbolize/dwarfline"
)

// symbolsMagic starts an encoded symbol table.
const symbolsMagic = "gpsyms01"

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
// The number changes whenever what readSymbols keeps may change.
func symbolsName(withDebugFile bool) string {
	if withDebugFile {
		return "symbols-1-debug"
	}
	return "symbols-1"
}

// loadSymbols sets b.syms and b.names from the table an earlier run kept
// in cache under name for b's build ID, and b.debugFile to debugPath
// when that table came from the debug file, and reports whether it did;
// a missing or bad entry changes nothing. Reading back the sorted table
// skips reading, ranking and sorting the ELF symbol tables
// (BenchmarkSymbolCache).
func (b *Binary) loadSymbols(cache *dwarfline.SectionCache, name, debugPath string) bool {
	data := cache.Get(b.buildID, name, maxSymbolsBytes)
	if data == nil {
		return false
	}
	syms, names, fromDebug, err := decodeSymbols(data)
	if err != nil {
		return false
	}
	b.syms, b.names = syms, names
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
// the number of symbols, the arena's length and flags.
const symbolsHead = len(symbolsMagic) + 12

// symbolBytes is the encoded size of one symbol: start and end (8 bytes
// each), name offset and length (4 each), sized (1).
const symbolBytes = 25

// encodeSymbols encodes a symbol table: symbolsMagic, the number of
// symbols, the length of the name arena and flags (1: the symbols came
// from the debug file; 4 bytes each), each symbol (symbolBytes,
// little-endian) and the arena. The section cache adds a CRC-32C.
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
	for _, s := range syms {
		out = le.AppendUint64(out, s.start)
		out = le.AppendUint64(out, s.end)
		out = le.AppendUint32(out, s.name)
		out = le.AppendUint32(out, s.nlen)
		sized := byte(0)
		if s.sized {
			sized = 1
		}
		out = append(out, sized)
	}
	return append(out, names...)
}

// errBadSymbols is every decoding error of a cached symbol table.
var errBadSymbols = errors.New("bad cached symbol table")

// decodeSymbols decodes what encodeSymbols wrote, refusing a table whose
// sizes or flags do not add up, whose names lie outside the arena or whose starts
// are not strictly increasing (Lookup's binary search needs them so);
// a bad input is an error, never a panic.
func decodeSymbols(data []byte) (syms []elfSym, names string, fromDebug bool, err error) {
	if len(data) < symbolsHead || string(data[:len(symbolsMagic)]) != symbolsMagic {
		return nil, "", false, errBadSymbols
	}
	le := binary.LittleEndian
	n, nn, flags := uint64(le.Uint32(data[8:])), uint64(le.Uint32(data[12:])), le.Uint32(data[16:])
	if n > maxCachedSymbols || flags > 1 || uint64(len(data)-symbolsHead) != n*symbolBytes+nn {
		return nil, "", false, errBadSymbols
	}
	syms = make([]elfSym, n)
	d := data[symbolsHead:]
	for i := range syms {
		s := &syms[i]
		s.start, s.end = le.Uint64(d), le.Uint64(d[8:])
		s.name, s.nlen = le.Uint32(d[16:]), le.Uint32(d[20:])
		s.sized = d[24] == 1
		if d[24] > 1 || uint64(s.name)+uint64(s.nlen) > nn || (i > 0 && s.start <= syms[i-1].start) {
			return nil, "", false, errBadSymbols
		}
		d = d[symbolBytes:]
	}
	return syms, string(d), flags == 1, nil
}
