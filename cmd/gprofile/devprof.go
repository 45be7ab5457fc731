package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
)

// startDevProfiles profiles gprofile itself, for its developers: with
// GPROFILE_CPUPROFILE=FILE a CPU profile of the whole run, with
// GPROFILE_MEMPROFILE=FILE a heap profile at the end (after a GC). It
// returns the function that writes them.
func startDevProfiles() func() {
	cpuPath, memPath := os.Getenv("GPROFILE_CPUPROFILE"), os.Getenv("GPROFILE_MEMPROFILE")
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
		if memPath == "" {
			return
		}
		f, err := os.Create(memPath)
		if err == nil {
			runtime.GC()
			err = pprof.WriteHeapProfile(f)
			f.Close()
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "gprofile: GPROFILE_MEMPROFILE: %v\n", err)
		}
	}
}
