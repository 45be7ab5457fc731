package main

import (
	"os"
	"runtime"
	"time"

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

// startProcsRate is the planned rate (samples a second) above which
// gprofile's start-up runs on every P for startProcsFor before it goes
// down to one. In its first few hundred milliseconds the reader reads the
// maps of every process it meets and copies the windows of samples it
// cannot unwind yet (no table built, no stack top learnt: windows of
// several KiB) for the worker, which builds the tables meanwhile; on one
// P, with GC beside, the reader fell behind the ring buffer at 4999 Hz on
// 2 CPUs and lost samples, far fewer with two Ps; at 999 Hz one P lost
// none and two cost more CPU (bench/run.sh; BENCHMARKS.md, issue 16
// session 22).
const (
	startProcsRate = 4096
	startProcsFor  = time.Second
)

// limitProcs sets GOMAXPROCS to 1 when s plans for at most
// singleProcRate samples a second and the user has not set GOMAXPROCS
// (after startProcsFor when the rate is above startProcsRate: see
// there); otherwise it leaves Go's default (every CPU). It reports
// whether it did.
func limitProcs(s *attach.Config) bool {
	rate, planned := s.PlannedRate()
	if !singleProc(rate, planned, os.Getenv("GOMAXPROCS") != "") {
		return false
	}
	if d := singleProcAfter(rate); d > 0 {
		time.AfterFunc(d, func() { runtime.GOMAXPROCS(1) })
		return true
	}
	runtime.GOMAXPROCS(1)
	return true
}

// singleProcAfter is how long limitProcs waits before it goes down to
// one P at a planned rate it does so for: startProcsFor above
// startProcsRate, else 0 (at once).
func singleProcAfter(rate uint64) time.Duration {
	if rate > startProcsRate {
		return startProcsFor
	}
	return 0
}

// singleProc is limitProcs' rule: a planned rate of at most
// singleProcRate samples a second, and GOMAXPROCS not set by the user.
func singleProc(rate uint64, planned, userSet bool) bool {
	return planned && !userSet && rate <= singleProcRate
}
