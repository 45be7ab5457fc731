package testutil

import (
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestCPUTime checks CPUTime against getrusage(2) for the same process:
// both count its user and system time, /proc in 10 ms ticks. No wall-clock
// limit: a busy machine gives the spin less CPU, and both sides see that.
func TestCPUTime(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	var ru syscall.Rusage
	for range 3 {
		before, err := CPUTime(self)
		if err != nil {
			t.Fatal(err)
		}
		// Spin until /proc shows 100 ms more CPU.
		for d := before; d < before+100*time.Millisecond; {
			if d, err = CPUTime(self); err != nil {
				t.Fatal(err)
			}
		}
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		proc, err := CPUTime(self)
		if err != nil {
			t.Fatal(err)
		}
		rusage := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		// /proc rounds down to a tick, and the two reads are a moment apart.
		if diff := rusage - proc; diff < -clockTick || diff > 3*clockTick {
			t.Errorf("CPUTime %v, getrusage %v: want them within a few 10 ms ticks", proc, rusage)
		}
	}
	if _, err := CPUTime("999999999"); err == nil {
		t.Error("CPUTime of a missing pid succeeded")
	}
}

func TestExpectedSamples(t *testing.T) {
	for _, c := range []struct {
		cpu, wall, window time.Duration
		hz, want          float64
	}{
		{time.Second, time.Second, time.Second, 99, 99},
		{500 * time.Millisecond, 2 * time.Second, time.Second, 100, 25}, // a quarter of a CPU
		{4 * time.Second, 2 * time.Second, 2 * time.Second, 999, 1998},  // many threads: one CPU at most
		{time.Second, 3 * time.Second, 2 * time.Second, 300, 200},       // the span is longer than the window
		{0, time.Second, time.Second, 999, 0},                           // asleep
		{time.Second, 0, time.Second, 999, 0},                           // no span
	} {
		if got := expectedSamples(c.cpu, c.wall, c.hz, c.window); got < c.want-1e-9 || got > c.want+1e-9 {
			t.Errorf("expectedSamples(cpu %v, wall %v, %v Hz, window %v) = %v, want %v", c.cpu, c.wall, c.hz, c.window, got, c.want)
		}
	}
}
