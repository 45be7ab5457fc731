package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
)

// startDevProfiles profiles gprofile itself, for its developers: with
// GPROFILE_CPUPROFILE=FILE, a CPU profile of the whole run. It returns the
// function that stops it and writes the file.
func startDevProfiles() func() {
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
		if cpu != nil {
			pprof.StopCPUProfile()
			cpu.Close()
		}
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
