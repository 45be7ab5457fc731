package output

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/gprofile/gprofile/internal/symbolize"
)

// SampleMeta describes one sample for the per-sample writers (TextWriter,
// JSONWriter).
type SampleMeta struct {
	// Time is when the sample was taken (wall clock); the zero Time when
	// unknown.
	Time time.Time
	// PID is the process ID (tgid), TID the thread ID, CPU the CPU the
	// sample was taken on.
	PID, TID, CPU uint32
	// Comm is the thread name (the kernel's comm); "" when unknown.
	Comm string
}

// TextWriter writes samples one by one as readable text, in the manner of
// the classic BPF profile tools:
//
//	[1756723652.366364804] COMM: app (pid=100, tid=101) @ CPU 1
//	Kernel:
//	0xffffffff81200010: vfs_write @ 0xffffffff81200000+0x10
//	0xffffffff81200110: ksys_write @ 0xffffffff81200100+0x10
//	Userspace:
//	0x00007f0000119574: write @ 0x00007f0000119540+0x34
//	0x0000555555555250: square @ 0x0000555555555240+0x10 app.c:3 [inlined]
//	0x0000555555555250: compute @ 0x0000555555555240+0x10 app.c:20
//	0x0000555555555000: [app+0x1000] (no-symbol)
//
// The header holds the sample's time as Unix seconds and nanoseconds
// (left out when SampleMeta.Time is zero), its thread name ("[unknown]"
// when empty), pid, tid and CPU. Then come the kernel frames and the user
// frames, each leaf first, one a line: the address, the function name,
// "@ start+offset" when the function's start (Frame.SymbolStart) is known,
// "file:line" when the source file is known, and "[inlined]" for frames
// inlined into the next. An unnamed frame is written as in folded stacks,
// "[libfoo.so+0x1a2b]" (file offset) or "[unknown]", followed by the reason
// in parentheses. An empty part is written as "No Kernel Stack" or "No
// Userspace Stack". Samples are separated by a blank line. Names are
// cleaned of control characters, as in folded stacks, so that every frame
// stays on its line.
//
// A TextWriter is not safe for concurrent use.
type TextWriter struct {
	w   io.Writer
	buf []byte
	n   int // samples written
}

// NewTextWriter returns a TextWriter that writes to w. It calls w.Write
// once per sample and does no buffering of its own: wrap w in a
// bufio.Writer (and flush it at the end) when it is a file or a pipe.
func NewTextWriter(w io.Writer) *TextWriter {
	return &TextWriter{w: w}
}

// WriteSample writes one sample with stack st (nil for an empty stack).
// The error is the one w returned.
func (tw *TextWriter) WriteSample(m SampleMeta, st *symbolize.Stack) error {
	b := tw.buf[:0]
	if tw.n > 0 {
		b = append(b, '\n')
	}
	b = appendTextHeader(b, &m)
	frames := stackFrames(st)
	b = appendTextPart(b, frames, true, "Kernel:\n", "No Kernel Stack\n")
	b = appendTextPart(b, frames, false, "Userspace:\n", "No Userspace Stack\n")
	tw.buf = b
	tw.n++
	if _, err := tw.w.Write(b); err != nil {
		return fmt.Errorf("write text sample: %w", err)
	}
	return nil
}

func appendTextHeader(b []byte, m *SampleMeta) []byte {
	if !m.Time.IsZero() {
		b = append(b, '[')
		b = strconv.AppendInt(b, m.Time.Unix(), 10)
		b = append(b, '.')
		b = appendPadded(b, uint64(m.Time.Nanosecond()), 10, 9)
		b = append(b, "] "...)
	}
	b = append(b, "COMM: "...)
	if m.Comm == "" {
		b = append(b, unknownName...)
	} else {
		b = appendClean(b, m.Comm, false)
	}
	b = append(b, " (pid="...)
	b = strconv.AppendUint(b, uint64(m.PID), 10)
	b = append(b, ", tid="...)
	b = strconv.AppendUint(b, uint64(m.TID), 10)
	b = append(b, ") @ CPU "...)
	b = strconv.AppendUint(b, uint64(m.CPU), 10)
	return append(b, '\n')
}

// appendTextPart appends the kernel or the user frames of frames, leaf
// first, under title, or none when there are none.
func appendTextPart(b []byte, frames []symbolize.Frame, kernel bool, title, none string) []byte {
	start := len(b)
	b = append(b, title...)
	n := 0
	for i := range frames {
		if f := &frames[i]; isKernel(f) == kernel {
			b = appendTextFrame(b, f)
			n++
		}
	}
	if n == 0 {
		b = append(b[:start], none...)
	}
	return b
}

func appendTextFrame(b []byte, f *symbolize.Frame) []byte {
	b = appendHex16(b, f.Address)
	b = append(b, ": "...)
	b = appendFrameName(b, f, false)
	if f.Function != "" && f.SymbolStart != 0 && f.SymbolStart <= f.Address {
		b = append(b, " @ "...)
		b = appendHex16(b, f.SymbolStart)
		b = append(b, "+0x"...)
		b = strconv.AppendUint(b, f.Address-f.SymbolStart, 16)
	}
	if f.File != "" {
		b = append(b, ' ')
		b = appendClean(b, f.File, false)
		if f.Line > 0 {
			b = append(b, ':')
			b = strconv.AppendInt(b, int64(f.Line), 10)
		}
	}
	if f.Inlined {
		b = append(b, " [inlined]"...)
	}
	if f.Function == "" && f.Reason != symbolize.ReasonNone {
		b = append(b, " ("...)
		b = append(b, f.Reason.String()...)
		b = append(b, ')')
	}
	return append(b, '\n')
}

// appendHex16 appends v as 0x and 16 hex digits.
func appendHex16(b []byte, v uint64) []byte {
	b = append(b, "0x"...)
	return appendPadded(b, v, 16, 16)
}

// appendPadded appends v in base, left-padded with zeros to width digits.
func appendPadded(b []byte, v uint64, base, width int) []byte {
	var tmp [64]byte
	d := strconv.AppendUint(tmp[:0], v, base)
	for range width - len(d) {
		b = append(b, '0')
	}
	return append(b, d...)
}
