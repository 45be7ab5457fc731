package output

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/gprofile/gprofile/internal/symbolize"
)

func TestTextWriterGolden(t *testing.T) {
	var buf bytes.Buffer
	tw := NewTextWriter(&buf)
	for _, s := range newFixture().samples() {
		if err := tw.WriteSample(s.meta, s.stack); err != nil {
			t.Fatal(err)
		}
	}
	golden(t, "fixture.txt", buf.Bytes())
}

func TestTextWriterEdgeCases(t *testing.T) {
	lib := newMapping("/usr/lib/libz.so.1", "", 0x7f0000002000, 0x1000, 0x2000, 7)
	var buf bytes.Buffer
	tw := NewTextWriter(&buf)
	samples := []struct {
		m  SampleMeta
		st *symbolize.Stack
	}{
		{SampleMeta{PID: 1, TID: 1, CPU: 0, Comm: ""}, nil},
		{SampleMeta{Time: time.Unix(5, 7), PID: 2, TID: 3, CPU: 1, Comm: "a\nb;c"}, &symbolize.Stack{Frames: []symbolize.Frame{
			{Address: 0x7f0000002abc, Mapping: lib, Reason: symbolize.ReasonNoSymbol},
			{Address: 0x1234, Function: "f", SymbolStart: 0x2000, File: "f.c"}, // start after address: left out
		}}},
	}
	for _, s := range samples {
		if err := tw.WriteSample(s.m, s.st); err != nil {
			t.Fatal(err)
		}
	}
	const want = `COMM: [unknown] (pid=1, tid=1) @ CPU 0
No Kernel Stack
No Userspace Stack

[5.000000007] COMM: a?b;c (pid=2, tid=3) @ CPU 1
No Kernel Stack
Userspace:
0x00007f0000002abc: [libz.so.1+0x2abc] (no-symbol)
0x0000000000001234: f f.c
`
	if got := buf.String(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestTextWriterError(t *testing.T) {
	errDisk := errors.New("disk full")
	err := NewTextWriter(failWriter{errDisk}).WriteSample(SampleMeta{}, nil)
	if !errors.Is(err, errDisk) {
		t.Errorf("got error %v, want one wrapping %v", err, errDisk)
	}
}

// TestPerSampleWritersNoAlloc checks that the text and JSON writers
// allocate nothing per sample once their buffers have grown.
func TestPerSampleWritersNoAlloc(t *testing.T) {
	s := newFixture().samples()[5] // the deepest stack, with inlined frames
	for name, write := range map[string]func(SampleMeta, *symbolize.Stack) error{
		"text": NewTextWriter(io.Discard).WriteSample,
		"json": NewJSONWriter(io.Discard).WriteSample,
	} {
		if err := write(s.meta, s.stack); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(100, func() { write(s.meta, s.stack) }); n != 0 {
			t.Errorf("%s writer allocates %v times per sample, want 0", name, n)
		}
	}
}

func BenchmarkTextWriter(b *testing.B) {
	benchmarkWriter(b, NewTextWriter(io.Discard).WriteSample)
}

func BenchmarkJSONWriter(b *testing.B) {
	benchmarkWriter(b, NewJSONWriter(io.Discard).WriteSample)
}

func benchmarkWriter(b *testing.B, write func(SampleMeta, *symbolize.Stack) error) {
	samples := newFixture().samples()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s := &samples[i%len(samples)]
		if err := write(s.meta, s.stack); err != nil {
			b.Fatal(err)
		}
	}
}
