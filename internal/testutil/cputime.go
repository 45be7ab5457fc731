package testutil

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clockTick is USER_HZ, the unit of utime and stime in /proc/PID/stat
// (100 on every Linux architecture gprofile runs on).
const clockTick = 10 * time.Millisecond

// CPUTime returns the CPU time (user + system) that /proc/PATH/stat
// reports, where path is "PID" for a whole process or "PID/task/TID" for a
// thread. Resolution: 10 ms.
func CPUTime(path string) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + path + "/stat")
	if err != nil {
		return 0, err
	}
	// The comm field may hold spaces: fields start after the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%s/stat", path)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%s/stat", path)
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad utime/stime in /proc/%s/stat", path)
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// CPUMeter measures the share of a CPU a process or thread gets, so that
// tests can expect samples in proportion to the CPU the workload really
// got (a busy machine gives it less than the wall time).
type CPUMeter struct {
	t     testing.TB
	path  string
	start time.Duration
	wall  time.Time
}

// StartCPU starts measuring /proc/PATH (see CPUTime).
func StartCPU(t testing.TB, path string) *CPUMeter {
	t.Helper()
	d, err := CPUTime(path)
	if err != nil {
		t.Fatal(err)
	}
	return &CPUMeter{t: t, path: path, start: d, wall: time.Now()}
}

// ExpectedSamples returns the samples a profiler at hz should take of the
// workload in a window of the given length inside the measured span: its
// CPU share since StartCPU (CPU seconds per wall second) × window × hz.
// The span may be longer than the window (a profiler's start and exit).
func (m *CPUMeter) ExpectedSamples(hz float64, window time.Duration) float64 {
	m.t.Helper()
	d, err := CPUTime(m.path)
	if err != nil {
		m.t.Fatal(err)
	}
	return expectedSamples(d-m.start, time.Since(m.wall), hz, window)
}

// expectedSamples is cpu/wall (the share of one CPU, at most 1) × window
// × hz.
func expectedSamples(cpu, wall time.Duration, hz float64, window time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	share := cpu.Seconds() / wall.Seconds()
	return min(share, 1) * window.Seconds() * hz
}
