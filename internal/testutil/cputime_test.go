package testutil

import (
	"os"
	"strconv"
	"testing"
	"time"
)

func TestCPUTime(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	m := StartCPU(t, self)
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
	}
	if got := m.ExpectedSamples(100, 200*time.Millisecond); got < 5 || got > 20 {
		t.Errorf("200 ms of spinning at 100 Hz: %.1f samples expected, want about 20", got)
	}
	if _, err := CPUTime("999999999"); err == nil {
		t.Error("CPUTime of a missing pid succeeded")
	}
}
