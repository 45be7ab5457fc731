package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	gpattach "github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/recorder"
)

func signalNotify(ch chan os.Signal) { signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM) }

// pollInterval is internal/attach's: the reader looks at the ring at least
// this often even when the BPF program has not woken it.
const pollInterval = 100 * time.Millisecond

// readLoop is internal/attach's Sampler.RunIdle loop without the perf
// events: it calls fn for every record, and idle whenever the ring is
// empty, until the reader is flushed and empty.
func readLoop(rd *ringbuf.Reader, fn func([]byte), idle func()) (uint64, error) {
	var rec ringbuf.Record
	var n uint64
	for {
		if rd.AvailableBytes() == 0 {
			if idle != nil {
				idle()
			}
			rd.SetDeadline(time.Now().Add(pollInterval))
		}
		err := rd.ReadInto(&rec)
		switch {
		case err == nil:
			n++
			fn(rec.RawSample)
		case errors.Is(err, os.ErrDeadlineExceeded):
		case errors.Is(err, ringbuf.ErrFlushed):
			return n, nil
		default:
			return n, err
		}
	}
}

// bareLoop only counts records.
func bareLoop(rd *ringbuf.Reader) (uint64, error) {
	return readLoop(rd, func([]byte) {}, nil)
}

// ringSource is a recorder.Source over the generator's ring buffer: it
// decodes each record (attach.DecodeRecord) as the sampler does.
type ringSource struct {
	rd  *ringbuf.Reader
	n   uint64 // records read
	bad error  // the first record that did not decode
}

func (s *ringSource) RunIdle(ctx context.Context, fn func(*gpattach.Sample), idle func()) error {
	var smp gpattach.Sample
	n, err := readLoop(s.rd, func(raw []byte) {
		if err := gpattach.DecodeRecord(raw, &smp); err != nil {
			s.bad = err
			return
		}
		fn(&smp)
	}, idle)
	s.n = n
	return err
}

// newGprofile makes gprofile's recorder (internal/recorder: the reader
// and worker goroutines, the stack memo, the symbolizer, the aggregate)
// over rd. It is made before sampling starts, as gprofile does (the
// kernel symbols load meanwhile).
func newGprofile(rd *ringbuf.Reader) (*recorder.Recorder, *ringSource, error) {
	src := &ringSource{rd: rd}
	rec, err := recorder.New(recorder.Config{Source: src})
	return rec, src, err
}

// gprofileLoop runs rec until the ring is flushed and returns the number
// of records read.
func gprofileLoop(rec *recorder.Recorder, src *ringSource) (uint64, error) {
	res, err := rec.Run(context.Background())
	if err == nil && src.bad != nil {
		err = src.bad
	}
	if err == nil && res.Aggregate.Len() == 0 {
		err = errors.New("aggregated nothing")
	}
	return src.n, err
}

func writeTable(path string, rs []stepResult, d time.Duration) error {
	var w io.Writer = os.Stdout
	if path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	fmt.Fprintf(w, "## Ring buffer throughput (synthetic)\n\n")
	fmt.Fprintf(w, "Records of gprofile's layout (%d-frame user stacks of the workload, 256 distinct leaf addresses) written by a BPF program at a fixed rate into a %d MiB ring buffer for %.0f s per step, read by one consumer pinned to its own CPU. *bare*: cilium/ebpf ringbuf.Reader loop that only counts; *gprofile*: gprofile's recorder (internal/recorder: decode, reader and worker goroutines, stack memo, symbolizer, aggregate) over the same loop. Consumer CPU is the process's CPU time over the step (for gprofile: both goroutines and the GC).\n\n",
		22, ringBytes>>20, d.Seconds())
	fmt.Fprintln(w, "| offered records/s | bare: delivered/s | bare: lost % | bare: consumer CPU % | gprofile: delivered/s | gprofile: lost % | gprofile: consumer CPU % | gprofile: µs/record |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- |")
	for i := 0; i+1 < len(rs); i += 2 {
		b, g := rs[i], rs[i+1]
		fmt.Fprintf(w, "| %.0f | %.0f | %.2f | %.0f | %.0f | %.2f | %.0f | %.2f |\n",
			float64(b.offered)/b.secs,
			float64(b.consumed)/b.secs, lostPct(b), 100*b.cpu/b.secs,
			float64(g.consumed)/g.secs, lostPct(g), 100*g.cpu/g.secs, 1e6*g.cpu/float64(max(g.consumed, 1)))
	}
	var bareMax, gpMax float64
	for _, r := range rs {
		rate := float64(r.offered) / r.secs
		if r.failed == 0 && r.consumer == "bare" {
			bareMax = max(bareMax, rate)
		}
		if r.failed == 0 && r.consumer == "gprofile" {
			gpMax = max(gpMax, rate)
		}
	}
	fmt.Fprintf(w, "\nLargest offered rate with no record lost: bare reader %.0f/s, gprofile's path %.0f/s (0: lost at every step). ", bareMax, gpMax)
	fmt.Fprintf(w, "CPU-bound ceiling of the consumer (1 s / CPU per record at the top step): bare %.1fM/s, gprofile's path %.1fM/s; losses below that come from the consumer being late (scheduling, GC, the first symbolization of a binary) while the %d MiB ring fills.\n",
		ceiling(rs, "bare")/1e6, ceiling(rs, "gprofile")/1e6, ringBytes>>20)
	return nil
}

// ceiling is 1 s divided by the consumer's CPU per record at its largest
// step.
func ceiling(rs []stepResult, consumer string) float64 {
	var top stepResult
	for _, r := range rs {
		if r.consumer == consumer && r.offered > top.offered {
			top = r
		}
	}
	if top.cpu == 0 || top.consumed == 0 {
		return 0
	}
	return float64(top.consumed) / top.cpu
}

func lostPct(r stepResult) float64 { return 100 * float64(r.failed) / float64(max(r.offered, 1)) }
