package main

import (
	"os"
	"runtime"

	"github.com/gprofile/gprofile/internal/attach"
)

// singleProcRate is the most samples a second (attach.Config.PlannedRate)
// for which gprofile runs its Go code on one P (GOMAXPROCS 1). The ring
// buffer reader hands samples to the symbolizing worker in batches; with
// a second P idle, each hand-over wakes another thread to run the worker
// (and the thread spins for work before it parks again), where with one
// P the worker runs on the reader's thread once the reader waits
// (BENCHMARKS.md, issue 16 session 19; bench/run.sh measures it). A
// worker busy symbolizing a new binary delays the reader until Go
// preempts it (10 ms), well inside the quarter of a second the ring
// buffer holds. Above this rate the reader and the worker may each need
// a CPU of their own.
const singleProcRate = 32_000

// limitProcs sets GOMAXPROCS to 1 when s plans for at most
// singleProcRate samples a second and the user has not set GOMAXPROCS;
// otherwise it leaves Go's default (every CPU). It reports whether it
// did.
func limitProcs(s *attach.Config) bool {
	rate, planned := s.PlannedRate()
	if !singleProc(rate, planned, os.Getenv("GOMAXPROCS") != "") {
		return false
	}
	runtime.GOMAXPROCS(1)
	return true
}

// singleProc is limitProcs' rule: a planned rate of at most
// singleProcRate samples a second, and GOMAXPROCS not set by the user.
func singleProc(rate uint64, planned, userSet bool) bool {
	return planned && !userSet && rate <= singleProcRate
}
