package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cilium/ebpf/ringbuf"
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

// gprofileLoop does per record what gprofile does: decode it (as
// internal/attach decodeRecord) and add it (as cmd/gprofile's collector:
// one map lookup by pid and raw IPs, symbolize a stack on first sight,
// intern the comm, aggregate). sym is made before sampling starts, as
// gprofile does (loading kallsyms takes a while).
func gprofileLoop(rd *ringbuf.Reader, sym *symbolize.Symbolizer) (uint64, error) {
	c := &collector{sym: sym, agg: output.NewAggregator(), stacks: map[string]*symbolize.Stack{}, comms: map[string]string{}}
	var s sample
	var bad error
	n, err := readLoop(rd, func(raw []byte) {
		if err := decode(raw, &s); err != nil {
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

// sample mirrors attach.Sample.
type sample struct {
	timeNs, period       uint64
	pid, tid, cpu, flags uint32
	comm                 []byte
	kernelIPs, userIPs   []uint64
}

// decode mirrors attach.decodeRecord (bpf/profile.bpf.c struct sample).
func decode(raw []byte, s *sample) error {
	const offIPs = 56
	if len(raw) < offIPs {
		return fmt.Errorf("record of %d bytes", len(raw))
	}
	ne := binary.NativeEndian
	klen, ulen := ne.Uint32(raw[32:]), ne.Uint32(raw[36:])
	if klen%8 != 0 || ulen%8 != 0 || offIPs+int(klen)+int(ulen) > len(raw) {
		return fmt.Errorf("record of %d bytes with stacks of %d and %d bytes", len(raw), klen, ulen)
	}
	s.timeNs, s.period = ne.Uint64(raw[0:]), ne.Uint64(raw[8:])
	s.pid, s.tid, s.cpu, s.flags = ne.Uint32(raw[16:]), ne.Uint32(raw[20:]), ne.Uint32(raw[24:]), ne.Uint32(raw[28:])
	comm := raw[40:56]
	if i := bytes.IndexByte(comm, 0); i >= 0 {
		comm = comm[:i]
	}
	s.comm = comm
	kn, un := int(klen/8), int(ulen/8)
	s.kernelIPs = s.kernelIPs[:0]
	for i := 0; i < kn; i++ {
		s.kernelIPs = append(s.kernelIPs, ne.Uint64(raw[offIPs+8*i:]))
	}
	s.userIPs = s.userIPs[:0]
	for i := 0; i < un; i++ {
		s.userIPs = append(s.userIPs, ne.Uint64(raw[offIPs+8*(kn+i):]))
	}
	return nil
}

// collector mirrors cmd/gprofile's collector.
type collector struct {
	sym    *symbolize.Symbolizer
	agg    *output.Aggregator
	stacks map[string]*symbolize.Stack
	comms  map[string]string
	key    []byte
}

func (c *collector) add(s *sample) {
	k := binary.NativeEndian.AppendUint32(c.key[:0], s.pid)
	k = binary.NativeEndian.AppendUint16(k, uint16(len(s.kernelIPs)))
	for _, ip := range s.kernelIPs {
		k = binary.NativeEndian.AppendUint64(k, ip)
	}
	for _, ip := range s.userIPs {
		k = binary.NativeEndian.AppendUint64(k, ip)
	}
	c.key = k
	st, ok := c.stacks[string(k)]
	if !ok {
		st = c.sym.Stack(s.pid, s.kernelIPs, s.userIPs)
		c.stacks[string(k)] = st
	}
	comm, ok := c.comms[string(s.comm)]
	if !ok {
		comm = string(s.comm)
		c.comms[comm] = comm
	}
	c.agg.Add(s.pid, comm, st, int64(s.period))
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
