package attach

import (
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/gprofile/gprofile/internal/testutil"
)

// ringWriter loads a socket filter that writes one 8-byte record to rb
// with the given bpf_ringbuf_output flags each time it is test-run.
func ringWriter(t *testing.T, rb *ebpf.Map, flags int32) *ebpf.Program {
	t.Helper()
	return ringSizedWriter(t, rb, 8, 42, flags)
}

// testRing returns a 4 KiB BPF ring buffer map, closed when t ends; it
// needs privileges (testutil.RequirePrivileges).
func testRing(t *testing.T) *ebpf.Map {
	t.Helper()
	testutil.RequirePrivileges(t)
	rb, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.RingBuf, MaxEntries: 4096})
	if err != nil {
		t.Fatalf("create ring buffer: %v", err)
	}
	t.Cleanup(func() { rb.Close() })
	return rb
}

// TestRingWait: a wait parked in the network poller ends when the BPF
// side wakes the ring buffer (BPF_RB_FORCE_WAKEUP), not when it writes
// without a wake-up (BPF_RB_NO_WAKEUP: then at its timeout, as the
// reader's poll interval does), and at once after wake.
func TestRingWait(t *testing.T) {
	rb := testRing(t)
	rd, err := ringbuf.NewReader(rb)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	w, err := newRingWait(rb)
	if err != nil {
		t.Fatalf("newRingWait: %v", err)
	}
	defer w.close()
	ready := func() bool { return rd.AvailableBytes() > 0 }

	// waitFor runs a wait of d in the background, calls during after
	// 100 ms, and returns how long the wait took.
	waitFor := func(d time.Duration, during func()) time.Duration {
		done := make(chan time.Duration)
		start := time.Now()
		go func() {
			w.wait(d, ready)
			done <- time.Since(start)
		}()
		time.Sleep(100 * time.Millisecond)
		during()
		return <-done
	}
	drain := func() {
		rd.SetDeadline(time.Unix(1, 0))
		var rec ringbuf.Record
		for rd.ReadInto(&rec) == nil {
		}
	}

	const bpfRBNoWakeup, bpfRBForceWakeup = 1, 2
	quiet := ringWriter(t, rb, bpfRBNoWakeup)
	loud := ringWriter(t, rb, bpfRBForceWakeup)
	input := make([]byte, 64) // a test run of a socket filter needs a packet

	if got := waitFor(600*time.Millisecond, func() {
		if _, err := quiet.Run(&ebpf.RunOptions{Data: input}); err != nil {
			t.Errorf("run writer: %v", err)
		}
	}); got < 500*time.Millisecond {
		t.Errorf("a record written without a wake-up ended the wait after %v; want the 600 ms timeout", got)
	}
	if !ready() {
		t.Fatal("the record written without a wake-up is not in the ring buffer")
	}
	drain()

	if got := waitFor(20*time.Second, func() {
		if _, err := loud.Run(&ebpf.RunOptions{Data: input}); err != nil {
			t.Errorf("run writer: %v", err)
		}
	}); got > 5*time.Second {
		t.Errorf("a forced wake-up ended the wait after %v; want about 100 ms", got)
	}
	drain()

	if got := waitFor(20*time.Second, w.wake); got > 5*time.Second {
		t.Errorf("wake ended the wait after %v; want about 100 ms", got)
	}
	start := time.Now()
	w.wait(20*time.Second, ready)
	if got := time.Since(start); got > time.Second {
		t.Errorf("a wait after wake took %v; want none", got)
	}
}

// TestTimerWait: the timer-only wait (for a ring fd the runtime cannot
// poll) ends at its timeout, and at once after wake, then and later.
func TestTimerWait(t *testing.T) {
	w := newTimerWait()
	start := time.Now()
	w.wait(30*time.Millisecond, func() bool { return true })
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("wait of 30 ms returned after %v", d)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		w.wake()
	}()
	start = time.Now()
	w.wait(10*time.Second, nil)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("wake ended the wait after %v", d)
	}
	if !w.stopped.Load() {
		t.Error("not stopped after wake")
	}
	start = time.Now()
	w.wait(10*time.Second, nil)
	w.wake() // a second wake does not panic on the closed channel
	if d := time.Since(start); d > time.Second {
		t.Errorf("a wait after wake took %v", d)
	}
	if err := w.close(); err != nil {
		t.Error(err)
	}
}
