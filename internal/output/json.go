package output

import (
	"fmt"
	"io"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/gprofile/gprofile/internal/symbolize"
)

// JSONWriter writes samples one by one as JSON Lines: one JSON object per
// sample, on one line. The schema (JSON_SCHEMA.md in this directory has
// it with an example):
//
//	time          string  when the sample was taken, RFC 3339 with ns, UTC
//	time_unix_ns  number  the same as ns since the Unix epoch (beyond 2^53:
//	                      JavaScript readers should parse "time")
//	pid, tid, cpu number  process ID (tgid), thread ID, CPU
//	comm          string  thread name
//	frames        array   kernel frames, then user frames, each leaf first;
//	                      inlined frames come before the frame they are
//	                      inlined into, with the same address
//
// and each frame:
//
//	address       string  "0x" and hex: the sampled instruction pointer
//	function      string  display name (demangled)
//	system_name   string  symbol-table name, when it differs from function
//	symbol_start  string  "0x" and hex: the function's first byte
//	file, line    string, number  source position
//	inlined       bool    inlined into the next frame
//	kernel        bool    a kernel frame
//	reason        string  why function is missing: no-symbol, no-mapping,
//	                      no-access, bad-elf, process-gone, kernel-hidden
//	mapping       object  the binary: path, build_id (hex), and start,
//	                      limit (exclusive) and offset (file offset of
//	                      start) as "0x" hex strings
//
// Members whose value is empty, zero or false are left out (time and
// time_unix_ns when the time is unknown), except pid, tid and cpu, and
// the start, limit and offset of a mapping. Addresses are strings because
// they do not fit in the integers JSON readers keep exactly. Strings are
// valid UTF-8: invalid bytes become U+FFFD.
//
// A JSONWriter builds each line in a buffer it reuses and calls w.Write
// once per sample; it allocates nothing once the buffer has grown. It is
// not safe for concurrent use.
type JSONWriter struct {
	w   io.Writer
	buf []byte
}

// NewJSONWriter returns a JSONWriter that writes to w. Like TextWriter it
// does no buffering of its own beyond one line: wrap w in a bufio.Writer
// when it is a file or a pipe.
func NewJSONWriter(w io.Writer) *JSONWriter {
	return &JSONWriter{w: w}
}

// WriteSample writes one sample with stack st (nil for an empty stack) as
// one line. The error is the one w returned.
func (jw *JSONWriter) WriteSample(m SampleMeta, st *symbolize.Stack) error {
	b := append(jw.buf[:0], '{')
	if !m.Time.IsZero() {
		b = append(b, `"time":"`...)
		b = m.Time.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, `","time_unix_ns":`...)
		b = strconv.AppendInt(b, m.Time.UnixNano(), 10)
		b = append(b, ',')
	}
	b = appendJSONUint(b, "pid", uint64(m.PID), false)
	b = appendJSONUint(b, "tid", uint64(m.TID), true)
	if m.Comm != "" {
		b = append(b, `,"comm":`...)
		b = appendJSONString(b, m.Comm)
	}
	b = appendJSONUint(b, "cpu", uint64(m.CPU), true)
	b = append(b, `,"frames":[`...)
	frames := stackFrames(st)
	n := 0
	for _, kernel := range [...]bool{true, false} {
		for i := range frames {
			if f := &frames[i]; isKernel(f) == kernel {
				if n > 0 {
					b = append(b, ',')
				}
				b = appendJSONFrame(b, f)
				n++
			}
		}
	}
	b = append(b, "]}\n"...)
	jw.buf = b
	if _, err := jw.w.Write(b); err != nil {
		return fmt.Errorf("write json sample: %w", err)
	}
	return nil
}

func appendJSONFrame(b []byte, f *symbolize.Frame) []byte {
	b = append(b, '{')
	b = appendJSONHex(b, "address", f.Address, false)
	if f.Function != "" {
		b = append(b, `,"function":`...)
		b = appendJSONString(b, f.Function)
		if f.SystemName != "" && f.SystemName != f.Function {
			b = append(b, `,"system_name":`...)
			b = appendJSONString(b, f.SystemName)
		}
	}
	if f.SymbolStart != 0 {
		b = appendJSONHex(b, "symbol_start", f.SymbolStart, true)
	}
	if f.File != "" {
		b = append(b, `,"file":`...)
		b = appendJSONString(b, f.File)
	}
	if f.Line != 0 {
		b = append(b, `,"line":`...)
		b = strconv.AppendInt(b, int64(f.Line), 10)
	}
	if f.Inlined {
		b = append(b, `,"inlined":true`...)
	}
	if isKernel(f) {
		b = append(b, `,"kernel":true`...)
	}
	if f.Function == "" && f.Reason != symbolize.ReasonNone {
		b = append(b, `,"reason":"`...)
		b = append(b, f.Reason.String()...)
		b = append(b, '"')
	}
	if m := f.Mapping; m != nil {
		b = append(b, `,"mapping":{`...)
		if m.Path != "" {
			b = append(b, `"path":`...)
			b = appendJSONString(b, m.Path)
			b = append(b, ',')
		}
		if m.BuildID != "" {
			b = append(b, `"build_id":`...)
			b = appendJSONString(b, m.BuildID)
			b = append(b, ',')
		}
		b = appendJSONHex(b, "start", m.Start, false)
		b = appendJSONHex(b, "limit", m.Limit, true)
		b = appendJSONHex(b, "offset", m.Offset, true)
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendJSONUint appends "name":v, after a comma if comma is true.
func appendJSONUint(b []byte, name string, v uint64, comma bool) []byte {
	if comma {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, name...)
	b = append(b, `":`...)
	return strconv.AppendUint(b, v, 10)
}

// appendJSONHex appends "name":"0x<v in hex>", after a comma if comma is
// true.
func appendJSONHex(b []byte, name string, v uint64, comma bool) []byte {
	if comma {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, name...)
	b = append(b, `":"0x`...)
	b = strconv.AppendUint(b, v, 16)
	return append(b, '"')
}

// appendJSONString appends s as a JSON string: '"', '\\' and control
// characters escaped, invalid UTF-8 bytes replaced by U+FFFD, and U+2028
// and U+2029 escaped so that the line is also valid JavaScript.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c >= 0x20 && c != '"' && c != '\\':
				b = append(b, c)
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, `\u202`...)
			b = append(b, hex[r&0xf])
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
