package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	gpattach "github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/output"
	"github.com/gprofile/gprofile/internal/symbolize"
)

func signalNotify(ch chan os.Signal) { signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM) }

// pollInterval is internal/attach's: the reader looks at the ring at least
// this often even when the BPF program has not woken it.
const pollInterval = 100 * time.Millisecond

// readLoop is internal/attach's Sampler.Run loop without the perf events:
// it calls fn for every record until the reader is flushed and empty.
func readLoop(rd *ringbuf.Reader, fn func([]byte)) (uint64, error) {
	var rec ringbuf.Record
	var n uint64
	for {
		rd.SetDeadline(time.Now().Add(pollInterval))
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
	return readLoop(rd, func([]byte) {})
}

// gprofileLoop does per record what gprofile does: decode it
// (attach.DecodeRecord) and add it (as cmd/gprofile's collector:
// one map lookup by pid and raw IPs, symbolize a stack on first sight,
// intern the comm, aggregate). sym is made before sampling starts, as
// gprofile does (loading kallsyms takes a while).
func gprofileLoop(rd *ringbuf.Reader, sym *symbolize.Symbolizer) (uint64, error) {
	c := &collector{sym: sym, agg: output.NewAggregator(), stacks: map[string]*symbolize.Stack{}, comms: map[string]string{}}
	var s gpattach.Sample
	var bad error
	n, err := readLoop(rd, func(raw []byte) {
		if err := gpattach.DecodeRecord(raw, &s); err != nil {
			bad = err
			return
		}
		c.add(&s)
	})
	if err == nil && bad != nil {
		err = bad
	}
	if err == nil && c.agg.Len() == 0 {
		err = errors.New("aggregated nothing")
	}
	return n, err
}

// collector mirrors cmd/gprofile's collector.
type collector struct {
	sym    *symbolize.Symbolizer
	agg    *output.Aggregator
	stacks map[string]*symbolize.Stack
	comms  map[string]string
	key    []byte
}

func (c *collector) add(s *gpattach.Sample) {
	k := binary.NativeEndian.AppendUint32(c.key[:0], s.PID)
	k = binary.NativeEndian.AppendUint16(k, uint16(len(s.KernelIPs)))
	for _, ip := range s.KernelIPs {
		k = binary.NativeEndian.AppendUint64(k, ip)
	}
	for _, ip := range s.UserIPs {
		k = binary.NativeEndian.AppendUint64(k, ip)
	}
	c.key = k
	st, ok := c.stacks[string(k)]
	if !ok {
		st = c.sym.Stack(s.PID, s.KernelIPs, s.UserIPs)
		c.stacks[string(k)] = st
	}
	comm, ok := c.comms[string(s.Comm)]
	if !ok {
		comm = string(s.Comm)
		c.comms[comm] = comm
	}
	c.agg.Add(s.PID, comm, st, int64(s.Period))
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
	fmt.Fprintf(w, "Records of gprofile's layout (%d-frame user stacks of the workload, 256 distinct leaf addresses) written by a BPF program at a fixed rate into a %d MiB ring buffer for %.0f s per step, read by one consumer pinned to its own CPU. *bare*: cilium/ebpf ringbuf.Reader loop that only counts; *gprofile*: the same loop plus gprofile's decode, stack cache, symbolizer and aggregator. Consumer CPU is the reading thread's CPU time over the step.\n\n",
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
	fmt.Fprintf(w, "CPU-bound ceiling of one consumer thread (1 s / CPU per record at the top step): bare %.1fM/s, gprofile's path %.1fM/s; losses below that come from the consumer being late (scheduling, GC, the first symbolization of a binary) while the %d MiB ring fills.\n",
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
