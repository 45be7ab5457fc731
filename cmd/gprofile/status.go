package main

import (
	"fmt"
	"os"
	"time"

	"github.com/gprofile/gprofile/internal/recorder"
	"golang.org/x/sys/unix"
)

// status keeps one live line on stderr while recording: elapsed time (of
// the duration), samples, samples lost and CPUs. It shows only when
// stderr is a terminal, -q is not given and there is no command (-- CMD):
// a command writes to the same terminal, and the line would cut into its
// output.
type status struct {
	done   chan struct{}
	exited chan struct{}
}

// startStatus starts the status line, or returns an inert status.
func startStatus(o *options, rec *recorder.Recorder) *status {
	st := &status{}
	if !statusWanted(o, isTerminal(os.Stderr)) {
		return st
	}
	st.done, st.exited = make(chan struct{}), make(chan struct{})
	go st.loop(o, rec)
	return st
}

// stop removes the line.
func (st *status) stop() {
	if st.done == nil {
		return
	}
	close(st.done)
	<-st.exited
	fmt.Fprint(os.Stderr, "\r\033[K")
}

func (st *status) loop(o *options, rec *recorder.Recorder) {
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
		if c, err := rec.Counters(); err == nil {
			lost = c.Lost
		}
		fmt.Fprintf(os.Stderr, "\r\033[Kgprofile: %.1fs%s, %d samples, %d lost, %d CPUs (Ctrl-C to stop)",
			time.Since(rec.Start()).Seconds(), of, rec.Samples(), lost, len(rec.CPUs()))
	}
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// statusWanted reports whether the status line shows, stderr being a
// terminal or not (see status).
func statusWanted(o *options, stderrTerminal bool) bool {
	return stderrTerminal && !o.quiet && o.command == nil
}
