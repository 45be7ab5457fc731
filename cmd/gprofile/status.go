package main

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/gprofile/gprofile/internal/attach"
	"golang.org/x/sys/unix"
)

// status keeps one live line on stderr while recording: elapsed time (of
// the duration), samples, samples lost and CPUs. It shows only when
// stderr is a terminal and -q is not given.
type status struct {
	samples atomic.Uint64
	done    chan struct{}
	exited  chan struct{}
}

// startStatus starts the status line, or returns an inert status.
func startStatus(o *options, s *attach.Sampler, start time.Time) *status {
	st := &status{}
	if o.quiet || !isTerminal(os.Stderr) {
		return st
	}
	st.done, st.exited = make(chan struct{}), make(chan struct{})
	go st.loop(o, s, start)
	return st
}

func (st *status) tick(samples uint64) { st.samples.Store(samples) }

// stop removes the line.
func (st *status) stop() {
	if st.done == nil {
		return
	}
	close(st.done)
	<-st.exited
	fmt.Fprint(os.Stderr, "\r\033[K")
}

func (st *status) loop(o *options, s *attach.Sampler, start time.Time) {
	defer close(st.exited)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-st.done:
			return
		case <-t.C:
		}
		of := ""
		if o.duration > 0 {
			of = fmt.Sprintf(" / %.0fs", o.duration.Seconds())
		}
		lost := uint64(0)
		if c, err := s.Counters(); err == nil {
			lost = c.Lost
		}
		fmt.Fprintf(os.Stderr, "\r\033[Kgprofile: %.1fs%s, %d samples, %d lost, %d CPUs (Ctrl-C to stop)",
			time.Since(start).Seconds(), of, st.samples.Load(), lost, len(s.CPUs()))
	}
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
