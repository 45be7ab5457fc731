package main

import (
	"context"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/symbolize"
)

// queueLen is how many samples may wait between the ring buffer reader
// and the symbolizing worker.
const queueLen = 8192

// collect reads samples on this goroutine and symbolizes and aggregates
// them on another, so that a slow symbolization (the first lookup in a
// large binary reads its DWARF) does not stop the ring buffer from being
// drained. The reader tells the symbolizer about each process as soon as
// it sees it (Observe), so that a process that exits while its samples
// wait in the queue still gets names. It returns when sampling has ended
// and every sample is in c.
func collect(ctx context.Context, s *attach.Sampler, sym *symbolize.Symbolizer, c *collector, st *status) error {
	work := make(chan *attach.Sample, queueLen)
	free := make(chan *attach.Sample, queueLen)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for smp := range work {
			c.add(smp)
			select {
			case free <- smp:
			default:
			}
		}
	}()
	var n uint64
	err := s.Run(ctx, func(smp *attach.Sample) {
		if smp.Flags&attach.FlagProcessExec != 0 {
			sym.Observe(smp.PID) // its new program, while it lives
			return
		}
		if smp.Flags&attach.FlagProcessExit == 0 {
			sym.ObserveStack(smp.PID, smp.UserIPs)
			n++
			st.tick(n)
		}
		var cp *attach.Sample
		select {
		case cp = <-free:
		default:
			cp = new(attach.Sample)
		}
		copySample(cp, smp)
		work <- cp
	})
	close(work)
	<-done
	return err
}

// copySample copies src into dst, reusing dst's slices.
func copySample(dst, src *attach.Sample) {
	comm, kips, uips := dst.Comm, dst.KernelIPs, dst.UserIPs
	*dst = *src
	dst.Comm = append(comm[:0], src.Comm...)
	dst.KernelIPs = append(kips[:0], src.KernelIPs...)
	dst.UserIPs = append(uips[:0], src.UserIPs...)
}
