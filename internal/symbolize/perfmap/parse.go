package perfmap

import (
	"bytes"

	"github.com/gprofile/gprofile/internal/symbolize/internal/textscan"
)

// MaxLine caps one line (bytes); longer lines are skipped.
const MaxLine = 4 << 10

// Symbol is one piece of JIT code named by a perf map line
// "START SIZE name" (START and SIZE in hex, with or without 0x; the name
// is the rest of the line and may hold spaces).
type Symbol struct {
	Start, Size uint64 // address and size in bytes
	Name        string
}

// Parse parses the text of a perf map. Lines that are malformed,
// have size 0, wrap around the address space, or are longer than 4 KiB
// are skipped and counted in skipped. The symbols come in file order.
func Parse(data []byte) (syms []Symbol, skipped int) {
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, textscan.Newline)
		if len(line) == 0 {
			continue
		}
		sym, ok := parseLine(line)
		if !ok {
			skipped++
			continue
		}
		syms = append(syms, sym)
	}
	return syms, skipped
}

// parseLine parses one line.
func parseLine(line []byte) (Symbol, bool) {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	if len(line) > MaxLine {
		return Symbol{}, false
	}
	start, rest, ok := parseHex(line)
	if !ok {
		return Symbol{}, false
	}
	size, rest, ok := parseHex(rest)
	if !ok || size == 0 || start+size < start {
		return Symbol{}, false
	}
	name := bytes.TrimSpace(rest)
	if len(name) == 0 {
		return Symbol{}, false
	}
	return Symbol{Start: start, Size: size, Name: string(name)}, true
}

// parseHex parses a hex number (optionally 0x-prefixed) followed by a
// space or tab, and returns the rest after it.
func parseHex(b []byte) (uint64, []byte, bool) {
	b = bytes.TrimLeft(b, " \t")
	if len(b) > 2 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X') {
		b = b[2:]
	}
	v, n, ok := textscan.ParseHex(b)
	if !ok || n == len(b) || b[n] != ' ' && b[n] != '\t' {
		return 0, nil, false
	}
	return v, b[n+1:], true
}
