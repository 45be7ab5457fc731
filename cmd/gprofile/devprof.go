package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"time"
)

// startDevProfiles profiles gprofile itself, for its developers: with
// GPROFILE_CPUPROFILE=FILE, a CPU profile of the whole run; with
// GPROFILE_STATS=FILE, gprofile's own figures every statsEvery (see
// startDevStats). It returns the function that stops both and writes the
// CPU profile.
func startDevProfiles() func() {
	stopStats := startDevStats()
	cpuPath := os.Getenv("GPROFILE_CPUPROFILE")
	var cpu *os.File
	if cpuPath != "" {
		var err error
		if cpu, err = os.Create(cpuPath); err == nil {
			err = pprof.StartCPUProfile(cpu)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "gprofile: GPROFILE_CPUPROFILE: %v\n", err)
		}
	}
	return func() {
		stopStats()
		if cpu != nil {
			pprof.StopCPUProfile()
			cpu.Close()
		}
	}
}

// The Go runtime samples the stacks of allocations for heap profiles
// (runtime.MemProfileRate, one every 512 KiB): a cost of every run that
// only GPROFILE_MEMPROFILE reads, so it is off without it. Set in init,
// before main's allocations, as the runtime asks.
func init() {
	if os.Getenv("GPROFILE_MEMPROFILE") == "" {
		runtime.MemProfileRate = 0
	}
}

// writeDevHeapProfile writes a heap profile (after a GC) to
// GPROFILE_MEMPROFILE=FILE when set: run calls it when sampling has ended
// and everything gathered is still in memory.
func writeDevHeapProfile() {
	path := os.Getenv("GPROFILE_MEMPROFILE")
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err == nil {
		runtime.GC()
		err = pprof.WriteHeapProfile(f)
		f.Close()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gprofile: GPROFILE_MEMPROFILE: %v\n", err)
	}
}

// statsEvery is how often GPROFILE_STATS gets a line.
const statsEvery = 10 * time.Second

// startDevStats appends, with GPROFILE_STATS=FILE, one line to FILE at
// once and then every statsEvery until the returned function is called
// (which writes a last one):
//
//	unix_time goroutines heap_inuse_bytes heap_objects
//
// with the time in seconds, the number of goroutines, and the Go heap's
// in-use spans and live objects (runtime.MemStats HeapInuse and
// HeapObjects, without forcing a GC). bench/soak.sh reads it.
func startDevStats() func() {
	path := os.Getenv("GPROFILE_STATS")
	if path == "" {
		return func() {}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gprofile: GPROFILE_STATS: %v\n", err)
		return func() {}
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(statsEvery)
		defer t.Stop()
		for {
			writeDevStats(f)
			select {
			case <-t.C:
			case <-done:
				writeDevStats(f)
				return
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
		f.Close()
	}
}

// writeDevStats writes one GPROFILE_STATS line to f.
func writeDevStats(f *os.File) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Fprintf(f, "%d %d %d %d\n", time.Now().Unix(), runtime.NumGoroutine(), ms.HeapInuse, ms.HeapObjects)
}
