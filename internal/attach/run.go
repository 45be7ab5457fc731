package attach

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// pollInterval is how often the reader looks at the ring buffer when the
// BPF program has not woken it (it wakes it only past wakeup_bytes). Each
// look wakes the Go runtime (its sysmon thread, the scheduler) and finds
// caches cold: a shorter interval costs CPU at every rate whose records
// do not fill half the ring first, and a longer one saved no more
// (bench/run.sh; BENCHMARKS.md, issue 16 session 26).
// Nothing waits on it: an exec wakes the reader at once, and an exec'd
// program's maps are read on timers of their own (symbolize's
// settleDelays), so that a short-lived process keeps its names.
const pollInterval = 250 * time.Millisecond

// openEvents opens a disabled perf event per CPU and attaches the program.
// Without Config.Event the first CPU decides the event: cycles, or
// cpu-clock when cycles does not exist here (or with SoftwareEvent).
func (s *Sampler) openEvents() error {
	fallback := s.cfg.Event == nil && !s.cfg.SoftwareEvent
	switch {
	case s.cfg.Event != nil:
		s.event = *s.cfg.Event
	case s.cfg.SoftwareEvent:
		s.event = EventCPUClock
	default:
		s.event = EventCycles
	}
	cpus := s.cpus
	if s.event.IsTracepoint() {
		// A tracepoint runs its BPF programs on every CPU once any perf
		// event of it has the program (the kernel keeps one program array
		// per tracepoint and refuses the same program twice): one event.
		cpus = cpus[:1]
	}
	for i, cpu := range cpus {
		err := s.openCPUVerbose(cpu)
		if err != nil && i == 0 && fallback && noPMU(err) {
			// The summary names the event sampled (cpu-clock); the reason
			// is for -v only (no PMU in a VM is the usual case).
			s.verbosef("gprofile: no hardware cycles event here (perf_event_open: %v); sampling the software cpu-clock event\n", err)
			s.event = EventCPUClock
			err = s.openCPUVerbose(cpu)
		}
		if errors.Is(err, errAttach) {
			return err
		}
		if err != nil {
			return s.eventError(cpu, err)
		}
	}
	return nil
}

// openCPUVerbose is openCPU at Open (not enabled), printing the attr and
// the outcome for -v.
func (s *Sampler) openCPUVerbose(cpu int) error {
	err := s.openCPU(cpu, false)
	if s.cfg.Verbose != nil {
		WriteAttr(s.cfg.Verbose, s.attr(), -1, cpu, -1)
		fd := -1
		if e := s.events[cpu]; e != nil {
			fd = e.fd
		}
		fmt.Fprintf(s.cfg.Verbose, "  = fd %d, err %v\n", fd, err)
	}
	return err
}

// attr is the perf_event_attr for s.event: frequency mode, or period mode
// with Config.Period; tracepoints deliver every hit (the BPF program
// applies the period itself). read() gives time_enabled, for the hotplug
// watcher (cpuEvent.stalled).
func (s *Sampler) attr() *unix.PerfEventAttr {
	a := perfAttr(s.event, s.cfg.FrequencyHz)
	a.Read_format = unix.PERF_FORMAT_TOTAL_TIME_ENABLED
	if s.cfg.Period != 0 || s.event.IsTracepoint() {
		a.Bits &^= unix.PerfBitFreq
		a.Sample = max(s.cfg.Period, 1)
		if s.event.IsTracepoint() {
			a.Sample = 1
		}
	}
	return a
}

func (s *Sampler) eventError(cpu int, err error) error {
	what := fmt.Sprintf("open %s perf event on cpu %d", s.event.Name, cpu)
	if errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("%s: %w (frequency %d Hz too high for kernel.perf_event_max_sample_rate?)", what, err, s.cfg.FrequencyHz)
	}
	if noPMU(err) && s.event.IsHardware() {
		return fmt.Errorf("%s: %w", what, ErrNoPMU)
	}
	return permissionError(what, err)
}

// attachProgram attaches the profile program to a perf event with a BPF
// link (Linux 5.15), which it returns, or with PERF_EVENT_IOC_SET_BPF on
// older kernels (nil link: closing the event detaches it).
func (s *Sampler) attachProgram(fd int) (link.Link, error) {
	prog := s.objs.Profile
	if s.event.IsTracepoint() {
		prog = s.objs.ProfileTP
	}
	l, err := link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: prog, Attach: ebpf.AttachPerfEvent})
	if err == nil {
		return l, nil
	}
	if !errors.Is(err, ebpf.ErrNotSupported) && !errors.Is(err, unix.EINVAL) {
		return nil, err
	}
	return nil, unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, prog.FD())
}

// setEnabled enables or disables every perf event.
func (s *Sampler) setEnabled(on bool) error {
	req := uint(unix.PERF_EVENT_IOC_DISABLE)
	if on {
		req = unix.PERF_EVENT_IOC_ENABLE
	}
	var errs []error
	s.mu.Lock()
	s.live = on
	for cpu, e := range s.events {
		if err := unix.IoctlSetInt(e.fd, req, 0); err != nil {
			errs = append(errs, fmt.Errorf("cpu %d: %w", cpu, err))
		}
		if on {
			e.mark()
		}
	}
	s.mu.Unlock()
	if len(s.cfg.Probes) > 0 {
		mode := uint32(probeOff)
		if on {
			mode = probeSample
		}
		errs = append(errs, s.setProbeMode(mode))
	}
	return errors.Join(errs...)
}

// Enable starts sampling on every CPU. Run calls it; call it first to know
// that sampling runs before starting a workload. Enabling twice is a no-op.
func (s *Sampler) Enable() error {
	if s.closed {
		return errors.New("enable a closed sampler")
	}
	if s.enabled {
		return nil
	}
	s.start = time.Now()
	if err := s.setEnabled(true); err != nil {
		return fmt.Errorf("enable perf events: %w", err)
	}
	if s.off != nil {
		if err := s.startOffCPU(); err != nil {
			s.setEnabled(false)
			return err
		}
	}
	s.enabled = true
	return nil
}

// Run enables the perf events and calls fn for every sample until ctx is
// done; then it disables the events, reads what is left in the ring
// buffer, and returns nil. fn runs on the calling goroutine; the Sample and
// its slices are valid only during the call. A record that does not decode
// is counted in Counters.Malformed and skipped.
func (s *Sampler) Run(ctx context.Context, fn func(*Sample)) error {
	return s.RunIdle(ctx, fn, nil)
}

// RunIdle is Run, and calls idle (when not nil), on the same goroutine,
// whenever the ring buffer is empty and Run is about to wait for more:
// a caller that hands samples to another goroutine in batches passes
// its partial batch on there, so that batching adds no latency.
func (s *Sampler) RunIdle(ctx context.Context, fn func(*Sample), idle func()) error {
	if err := s.Enable(); err != nil {
		return err
	}
	// With the ring's fd in the network poller (ringWait), ReadInto never
	// blocks (a deadline in the past); without it ReadInto waits, and the
	// in-place reader (s.ring) waits on a timer.
	w, werr := newRingWait(s.objs.Events)
	if werr != nil {
		s.verbosef("gprofile: %v; waiting on a timer or in epoll_wait\n", werr)
		if s.ring != nil {
			w = newTimerWait()
		}
	} else if s.reader != nil {
		s.reader.SetDeadline(time.Unix(1, 0))
	}
	if w != nil {
		defer w.close()
	}
	stopped, done := make(chan struct{}), make(chan struct{})
	defer func() { close(stopped); <-done }()
	go func() {
		defer close(done)
		s.watch(ctx, stopped, w)
	}()
	var smp Sample
	if s.ring != nil {
		s.consume(s.ring, w, &smp, fn, idle)
		return nil
	}
	var rec ringbuf.Record
	ready := func() bool { return s.reader.AvailableBytes() > 0 }
	for {
		// Wait only when the ring is empty: in ringWait, or (without it)
		// in ReadInto with a fresh deadline, not a clock read per record.
		// (A record that lands after the check ends the wait at once.)
		if !ready() {
			if idle != nil {
				idle()
			}
			if w != nil {
				w.wait(pollInterval, ready)
			} else {
				s.reader.SetDeadline(time.Now().Add(pollInterval))
			}
		}
		err := s.reader.ReadInto(&rec)
		switch {
		case err == nil:
			if DecodeRecord(rec.RawSample, &smp) != nil {
				s.malformed.Add(1)
				continue
			}
			fn(&smp)
		case errors.Is(err, os.ErrDeadlineExceeded):
		case errors.Is(err, ringbuf.ErrFlushed):
			return nil
		default:
			s.setEnabled(false)
			return fmt.Errorf("read ring buffer: %w", err)
		}
	}
}

// consume is RunIdle's reader with rc and w: it reads what the ring holds
// in place, then waits in w until more is written, until w is woken
// (the events are disabled by then) and what is left is read.
func (s *Sampler) consume(rc *ringConsumer, w *ringWait, smp *Sample, fn func(*Sample), idle func()) {
	decode := func(raw []byte) {
		if DecodeRecord(raw, smp) != nil {
			s.malformed.Add(1)
			return
		}
		fn(smp)
	}
	ready := func() bool { return rc.available() > 0 }
	for {
		if rc.consume(decode) > 0 {
			continue
		}
		switch {
		case w.stopped.Load():
			rc.drain(decode, drainTries)
			return
		case ready(): // a record still being written
			runtime.Gosched()
			continue
		}
		if idle != nil {
			idle()
		}
		w.wait(pollInterval, ready)
	}
}

// drainTries bounds the passes over the ring at the end of a run while a
// record is still being written (a BPF program that began before the
// events were disabled).
const drainTries = 10000

// watch runs beside Run's reader until ctx is done, when it stops the
// off-CPU programs, disables the events and ends the reader's wait (w's
// too, when not nil), or
// until stopped closes. Every hotplugInterval it follows CPU hotplug
// (checkCPUs) when there is an event per CPU.
func (s *Sampler) watch(ctx context.Context, stopped <-chan struct{}, w *ringWait) {
	var tick <-chan time.Time
	if s.perCPU() {
		t := time.NewTicker(hotplugInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			if err := s.stopOffCPU(); err != nil {
				s.logf("gprofile: %v\n", err)
			}
			s.setEnabled(false)
			if s.reader != nil {
				s.reader.Flush()
			}
			if w != nil {
				w.wake()
			}
			return
		case <-stopped:
			return
		case now := <-tick:
			s.checkCPUs(now.Sub(s.start))
		}
	}
}
