package main

import (
	"fmt"
	"os"
	"syscall"
	"time"
)

// repeatWindow is how long after a first SIGINT or SIGTERM a repeat
// counts as the same interrupt: GNU timeout signals gprofile and then its
// process group, and a terminal's Ctrl-C reaches gprofile and the command
// it runs, so two signals often arrive microseconds apart.
const repeatWindow = time.Second

// interrupts tells a stop from an abort: the first signal stops sampling
// (the profile is written), a repeat within repeatWindow of it is the same
// one, and a later one aborts.
type interrupts struct{ first time.Time }

// abort records a signal that arrived at now and reports whether it
// aborts the run.
func (i *interrupts) abort(now time.Time) bool {
	if i.first.IsZero() {
		i.first = now
		return false
	}
	return now.Sub(i.first) >= repeatWindow
}

// handleSignals acts on SIGINT and SIGTERM until sigs is closed. The
// first stops sampling (cancel); with a command (kid not nil), profiling
// ends when the command exits, and the signal is passed on to it unless
// the command has exited within forwardDelay (as gprofile stat does): a
// signal sent to gprofile alone (kill -INT PID) thus reaches the command
// as under perf, while a terminal's Ctrl-C, which the command gets from
// the terminal too, usually reaches it once. A note says so when the
// command still runs a second later. A repeat after repeatWindow aborts:
// the unfinished output is removed, the command gets SIGTERM, and
// gprofile exits 130.
func handleSignals(sigs <-chan os.Signal, cancel func(), out *outFile, kid *child) {
	var in interrupts
	var waiting, forward <-chan time.Time
	var first os.Signal
	for n := 1; ; n++ {
		select {
		case sig, ok := <-sigs:
			if !ok {
				return
			}
			if !in.abort(time.Now()) {
				switch {
				case kid == nil:
					cancel()
				case n == 1:
					first = sig
					forward = time.After(forwardDelay)
					waiting = time.After(repeatWindow)
				}
				continue
			}
			out.abort()
			if kid != nil {
				kid.cmd.Process.Signal(syscall.SIGTERM)
			}
			fmt.Fprintln(os.Stderr, "gprofile: interrupted twice, nothing written")
			os.Exit(130)
		case <-forward:
			forward = nil
			if !kid.exited() {
				kid.cmd.Process.Signal(first)
			}
		case <-waiting:
			waiting = nil
			if !kid.exited() {
				fmt.Fprintf(os.Stderr, "gprofile: waiting for the command (pid %d) to exit; interrupt again to stop without writing the profile\n", kid.cmd.Process.Pid)
			}
		}
	}
}
