package main

import (
	"context"
	"fmt"
	"os"
	"time"
)

// targetPoll is how often stopWhenTargetsExit looks at the targets.
const targetPoll = 250 * time.Millisecond

// targets tells whether a target process is alive (recorder.Recorder).
type targets interface{ TargetsAlive() (bool, error) }

// stopWhenTargetsExit calls stop once every target process of s (-p pids
// and the processes they forked) has exited, saying so unless quiet, as
// `perf record -p` ends when its targets do. It returns when ctx is done.
func stopWhenTargetsExit(ctx context.Context, s targets, quiet bool, stop func()) {
	t := time.NewTicker(targetPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		alive, err := s.TargetsAlive()
		if err != nil || alive {
			continue
		}
		if !quiet {
			fmt.Fprintln(os.Stderr, "gprofile: every target process has exited; stopping")
		}
		stop()
		return
	}
}
