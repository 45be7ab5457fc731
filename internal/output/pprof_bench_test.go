package output

import (
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize"
)

// benchAggregate is the aggregate of a busy run, made up: 20 processes of
// one program and its 4 libraries (each process at its own load
// addresses), 4000 distinct stacks of 4 kernel and 24 user frames drawn
// from 3000 functions, each stack in 3 threads.
func benchAggregate() *Aggregator {
	r := rand.New(rand.NewPCG(3, 4))
	a := NewAggregator()
	kernel := &symbolize.Mapping{Start: 0xffffffff81000000, Limit: 0xffffffff82000000, Kernel: true}
	for pid := uint32(1); pid <= 20; pid++ {
		var maps []*symbolize.Mapping
		for lib := range 5 {
			start := uint64(pid)<<32 + uint64(lib)<<24
			maps = append(maps, &symbolize.Mapping{Start: start, Limit: start + 1<<20, Path: fmt.Sprintf("/usr/lib/lib%d.so", lib),
				BuildID: fmt.Sprintf("b%d", lib), Device: 1, Inode: uint64(lib + 1)})
		}
		for range 200 {
			var frames []symbolize.Frame
			for k := range 4 {
				frames = append(frames, symbolize.Frame{Address: 0xffffffff81000000 + uint64(r.IntN(500))*64, Function: fmt.Sprintf("k%d", k), Kernel: true, Mapping: kernel})
			}
			for range 24 {
				fn := r.IntN(3000)
				m := maps[fn%5]
				frames = append(frames, symbolize.Frame{Address: m.Start + uint64(fn)*32 + 4, Function: fmt.Sprintf("fn%d", fn),
					File: "f.c", Line: fn % 100, Mapping: m})
			}
			id := a.InternStack(pid, &symbolize.Stack{Frames: frames})
			for tid := range uint32(3) {
				a.AddStack(SampleKey{PID: pid, TID: pid*10 + tid, Comm: "w"}, id, 1000)
			}
		}
	}
	return a
}

// benchmarkWrite runs write on a fresh benchAggregate per iteration (the
// aggregate's first write is the one a run pays for; its making is not
// timed).
func benchmarkWrite(b *testing.B, write func(*Aggregator) error) {
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		a := benchAggregate()
		b.StartTimer()
		if err := write(a); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWritePprof writes the pprof profile of benchAggregate and its
// top table: the end of a run in the default format. file-bytes is the
// size of the gzipped profile.
func BenchmarkWritePprof(b *testing.B) {
	var n countWriter
	benchmarkWrite(b, func(a *Aggregator) error {
		n = 0
		if err := WritePprof(&n, a, Meta{Labels: []string{LabelPID, LabelTID, LabelComm}}); err != nil {
			return err
		}
		return WriteTop(io.Discard, a, 10)
	})
	b.ReportMetric(float64(n), "file-bytes")
}

// countWriter counts the bytes written to it.
type countWriter int

func (c *countWriter) Write(p []byte) (int, error) {
	*c += countWriter(len(p))
	return len(p), nil
}

// BenchmarkWriteFolded writes the folded stacks of benchAggregate and its
// top table.
func BenchmarkWriteFolded(b *testing.B) {
	benchmarkWrite(b, func(a *Aggregator) error {
		if err := WriteFolded(io.Discard, a); err != nil {
			return err
		}
		return WriteTop(io.Discard, a, 10)
	})
}
