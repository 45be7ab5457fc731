package output

import (
	"bufio"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gprofile/gprofile/internal/symbolize"
)

// unknownName stands for a frame or thread that has no name.
const unknownName = "[unknown]"

// kernelSuffix marks kernel frames, as stackcollapse-perf.pl --kernel does.
const kernelSuffix = "_[k]"

// WriteFolded writes the samples of a as folded stacks, the format of Brendan
// Gregg's stackcollapse scripts that flamegraph.pl and speedscope read: one
// line per distinct stack,
//
//	comm;user_root;...;user_leaf;kernel_root_[k];...;kernel_leaf_[k] COUNT
//
// root first, the user part before the kernel part, inlined frames as frames
// of their own, frames named by FoldedName, the comm sanitized the same way
// (an empty comm written as "[unknown]"). COUNT is the number of samples
// (Sample.Count), summed over the samples that give the same line; lines
// whose counts sum to 0 are left out. Lines are sorted in byte order, so
// the output of two runs can be compared with diff. Writes to w are
// buffered; the error is the first one w returned.
func WriteFolded(w io.Writer, a *Aggregator) error {
	return WriteFoldedOptions(w, a, FoldedOptions{})
}

// FoldedOptions changes the first frame of folded stacks.
type FoldedOptions struct {
	// PerPID writes the first frame as comm-PID, so that processes with
	// the same name stay apart.
	PerPID bool
	// PerThread writes it as comm-PID/TID; the samples must have been
	// aggregated by thread (a SampleKey with TID set).
	PerThread bool
	// FullNames keeps C++ parameter lists in function names (perf's
	// --full-names style); by default they are cut (symbolize.ShortName).
	FullNames bool
}

// WriteFoldedOptions is WriteFolded with the first frame chosen by opts.
func WriteFoldedOptions(w io.Writer, a *Aggregator, opts FoldedOptions) error {
	counts := make(map[string]int64)
	names := newFoldedNames(a, opts.FullNames)
	var line []byte
	a.eachRecord(func(r *record, i int) {
		v := a.value(r, i, a.display)
		line = names.appendStack(line[:0], r, opts)
		counts[string(line)] += v
	})
	lines := make([]string, 0, len(counts))
	for l, c := range counts {
		if c != 0 {
			lines = append(lines, l)
		}
	}
	slices.Sort(lines)

	bw := bufio.NewWriterSize(w, 64<<10)
	var num []byte
	for _, l := range lines {
		bw.WriteString(l)
		bw.WriteByte(' ')
		num = strconv.AppendInt(num[:0], counts[l], 10)
		num = append(num, '\n')
		bw.Write(num)
	}
	// bufio.Writer keeps the first error; Flush reports it.
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write folded stacks: %w", err)
	}
	return nil
}

// foldedNames makes the folded text of an Aggregator's locations, each
// once: ";name" for each of its frames, root first, all in one buffer.
type foldedNames struct {
	a      *Aggregator
	full   bool       // keep C++ parameter lists
	buf    []byte     // the texts made so far
	span   [][2]int32 // location id -> its text in buf; {0, 0} until made
	kernel []bool     // location id -> whether it is a kernel location
	locs   []uint32   // the locations of the stack being folded
}

func newFoldedNames(a *Aggregator, full bool) *foldedNames {
	n := max(a.locs.off.len()-1, 0)
	return &foldedNames{a: a, full: full, span: make([][2]int32, n), kernel: make([]bool, n)}
}

// location returns the folded text of location loc (valid until the
// next call) and whether it is a kernel location.
func (fn *foldedNames) location(loc uint32) ([]byte, bool) {
	if sp := fn.span[loc]; sp[1] != 0 {
		return fn.buf[sp[0]:sp[1]], fn.kernel[loc]
	}
	from, to := fn.a.locs.span(loc)
	start := len(fn.buf)
	var kernel bool
	for k := to - 1; k >= from; k-- {
		f := fn.a.frame(fn.a.locs.frames.at(k))
		kernel = isKernel(&f)
		fn.buf = appendFoldedName(append(fn.buf, ';'), &f, fn.full)
	}
	fn.span[loc], fn.kernel[loc] = [2]int32{int32(start), int32(len(fn.buf))}, kernel
	return fn.buf[start:], kernel
}

// appendStack appends the folded line of r without its count: the comm
// (with the pid and tid opts asks for), then the user part, then the
// kernel part, each from its root (the end of the stack) to its leaf.
func (fn *foldedNames) appendStack(buf []byte, r *record, opts FoldedOptions) []byte {
	comm := fn.a.strs.str(r.comm)
	if comm == "" {
		buf = append(buf, unknownName...)
	} else {
		buf = appendSanitized(buf, comm)
	}
	switch {
	case opts.PerThread:
		buf = fmt.Appendf(buf, "-%d/%d", r.pid, r.tid)
	case opts.PerPID:
		buf = fmt.Appendf(buf, "-%d", r.pid)
	}
	t := &fn.a.stacks
	from, to := t.span(r.stack)
	fn.locs = fn.locs[:0]
	for j := from; j < to; j++ {
		fn.locs = append(fn.locs, *t.locs.at(j))
	}
	for _, kernel := range [...]bool{false, true} {
		for i := len(fn.locs) - 1; i >= 0; i-- {
			if text, k := fn.location(fn.locs[i]); k == kernel {
				buf = append(buf, text...)
			}
		}
	}
	return buf
}

// FoldedName returns the name of f as it appears in folded stacks:
//
//   - the function name (Frame.Function) when the frame is named;
//   - otherwise, for a frame in a file mapping, "[<file>+0x<offset>]", where
//     <file> is the base name of the mapping's path (without the brackets of
//     pseudo-paths such as "[vdso]") and <offset> the file offset of the
//     address in hex, Address - Mapping.Start + Mapping.Offset, which
//     stays the same across processes and ASLR;
//   - otherwise (no mapping, an anonymous mapping, or a kernel frame)
//     "[unknown]".
//
// C++ parameter lists are cut (symbolize.ShortName: "ns::f(int)" becomes
// "ns::f"). Kernel frames get the suffix "_[k]". Names are sanitized for
// the folded format: ';' becomes ':', and control characters (newlines
// and tabs included), line separators and invalid UTF-8 become '?'.
func FoldedName(f *symbolize.Frame) string {
	return string(appendFoldedName(nil, f, false))
}

// appendFoldedName appends FoldedName(f), with C++ parameter lists kept
// when full is true.
func appendFoldedName(buf []byte, f *symbolize.Frame, full bool) []byte {
	if f.Function != "" && !full && !isKernel(f) {
		short := *f
		short.Function = symbolize.ShortName(f.Function)
		f = &short
	}
	buf = appendFrameName(buf, f, true)
	if isKernel(f) && !isOffCPUMarker(f.Function) {
		buf = append(buf, kernelSuffix...)
	}
	return buf
}

// appendFrameName appends the name of f as FoldedName makes it, without
// the kernel suffix, with ';' replaced by ':' if folded is true.
func appendFrameName(buf []byte, f *symbolize.Frame, folded bool) []byte {
	switch m := f.Mapping; {
	case f.Function != "":
		buf = appendClean(buf, f.Function, folded)
	case m != nil && !isKernel(f) && m.Path != "":
		buf = append(buf, '[')
		buf = appendClean(buf, mappingBase(m.Path), folded)
		buf = append(buf, "+0x"...)
		buf = strconv.AppendUint(buf, f.Address-m.Start+m.Offset, 16)
		buf = append(buf, ']')
	default:
		buf = append(buf, unknownName...)
	}
	return buf
}

// isKernel reports whether f is a kernel frame.
func isKernel(f *symbolize.Frame) bool {
	return f.Kernel || (f.Mapping != nil && f.Mapping.Kernel)
}

// mappingBase returns the base name of a mapping's path, with the brackets
// of a pseudo-path ("[vdso]") removed.
func mappingBase(path string) string {
	base := filepath.Base(path)
	if len(base) > 2 && strings.HasPrefix(base, "[") && strings.HasSuffix(base, "]") {
		base = base[1 : len(base)-1]
	}
	return base
}

// appendSanitized appends s with ';' replaced by ':' and control
// characters, line and paragraph separators and invalid UTF-8 bytes
// replaced by '?', so that a name is one field of one folded line.
func appendSanitized(buf []byte, s string) []byte {
	return appendClean(buf, s, true)
}

// appendClean appends s with control characters, line and paragraph
// separators and invalid UTF-8 bytes replaced by '?', so that it stays on
// one line of a terminal, and ';' replaced by ':' if semicolon is true.
func appendClean(buf []byte, s string, semicolon bool) []byte {
	for i := 0; i < len(s); {
		if c := s[i]; c >= 0x20 && c < 0x7f {
			if c == ';' && semicolon {
				c = ':'
			}
			buf = append(buf, c)
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			buf = append(buf, '?')
		} else {
			buf = append(buf, s[i:i+size]...)
		}
		i += size
	}
	return buf
}
