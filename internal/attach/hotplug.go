package attach

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// hotplugInterval is how often Run re-reads the online CPU list and checks
// that every per-CPU sampling event still runs: one read of
// OnlineCPUsPath and one 16-byte read per event.
const hotplugInterval = time.Second

// cpuEvent is the sampling perf event of one CPU and its BPF link.
type cpuEvent struct {
	fd   int
	link link.Link // nil when attached with PERF_EVENT_IOC_SET_BPF
	// enabledNs is the event's time_enabled at checked, the last mark or
	// check: an enabled per-CPU event's time_enabled keeps pace with the
	// wall clock until a hotplug takes the event off its CPU (the kernel
	// does not put it back).
	enabledNs uint64
	checked   time.Time
}

// stallSlack is how far an event's time_enabled may fall behind the wall
// clock between two checks before the event counts as taken off its CPU.
const stallSlack = hotplugInterval / 10

// close detaches the program and closes the event.
func (e *cpuEvent) close() error {
	var errs []error
	if e.link != nil {
		errs = append(errs, e.link.Close())
	}
	return errors.Join(append(errs, unix.Close(e.fd))...)
}

// timeEnabled reads the event's time_enabled (read_format
// PERF_FORMAT_TOTAL_TIME_ENABLED), in ns.
func (e *cpuEvent) timeEnabled() (uint64, error) {
	var buf [16]byte // value, time_enabled
	n, err := unix.Read(e.fd, buf[:])
	if err == nil && n != len(buf) {
		err = fmt.Errorf("read %d bytes of a perf event, want %d", n, len(buf))
	}
	return binary.NativeEndian.Uint64(buf[8:]), err
}

// mark notes the event's time_enabled now, when it is enabled.
func (e *cpuEvent) mark() {
	e.enabledNs, _ = e.timeEnabled()
	e.checked = time.Now()
}

// stalled reports whether the enabled event's time_enabled fell behind
// the wall clock since the last mark or check by more than stallSlack (it
// stopped when its CPU went offline), or cannot be read.
func (e *cpuEvent) stalled() bool {
	ns, err := e.timeEnabled()
	now := time.Now()
	wall := now.Sub(e.checked)
	ran := time.Duration(ns - e.enabledNs)
	e.enabledNs, e.checked = ns, now
	return err != nil || ran+stallSlack < wall
}

// CPUChange is a change in the set of CPUs sampled during Run, seen by the
// watcher that reads OnlineCPUsPath every second: a CPU that went offline
// (its perf event closed), or one that came online, or back online, whose
// perf event was opened and enabled with the same attributes as at Open.
// A CPU that went offline and came back between two looks shows as both,
// at the same time.
type CPUChange struct {
	CPU    int
	Online bool
	// At is when the watcher saw the change, since sampling was enabled;
	// up to a second after it happened.
	At time.Duration
}

// maxChanges is how many CPUChanges a Sampler keeps; later ones are only
// counted (a machine whose CPUs come and go for days).
const maxChanges = 256

// Hotplug returns the CPU changes seen during Run, in order, the first
// maxChanges of them, and how many more there were; nil, 0 when no CPU
// went offline or came online. Safe from any goroutine.
func (s *Sampler) Hotplug() (changes []CPUChange, more int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.changes), s.moreChanges
}

// addChange records c; s.mu is held.
func (s *Sampler) addChange(c CPUChange) {
	if len(s.changes) < maxChanges {
		s.changes = append(s.changes, c)
	} else {
		s.moreChanges++
	}
}

// MissedCPUs returns the CPUs online now (of Config.CPUs, when set) that
// have no sampling event: the watcher could not open one yet (it retries
// every second; -v says why). It returns nil when the online list cannot
// be read, and with probes, tracepoint events or off-CPU time only (not
// sampled per CPU).
func (s *Sampler) MissedCPUs() []int {
	if !s.perCPU() {
		return nil
	}
	online, err := OnlineCPUs()
	if err != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var missed []int
	for _, c := range online {
		if s.wants(c) && s.events[c] == nil {
			missed = append(missed, c)
		}
	}
	return missed
}

// perCPU reports whether the sampler has one sampling event per CPU, the
// events the watcher keeps: not with probes, off-CPU time only or a
// tracepoint event (one event, whose program the kernel runs on every CPU
// as long as the event is open, online or not).
func (s *Sampler) perCPU() bool {
	return len(s.cfg.Probes) == 0 && (s.cfg.OffCPU == nil || !s.cfg.OffCPU.Only) && !s.event.IsTracepoint()
}

// wants reports whether cpu is to be sampled when online: every CPU, or
// those of Config.CPUs.
func (s *Sampler) wants(cpu int) bool {
	return s.cfg.CPUs == nil || slices.Contains(s.cfg.CPUs, cpu)
}

// checkCPUs is one look of the watcher: it closes the events of CPUs gone
// offline or whose event stopped (a CPU that went offline and came back
// since the last look), and opens, attaches and enables an event on every
// wanted online CPU that has none. An open that fails is retried at the
// next look; -v says why once per CPU until it works.
func (s *Sampler) checkCPUs(at time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.live {
		return
	}
	online, err := s.online.read()
	if err != nil {
		if !s.onlineErr {
			s.verbosef("gprofile: cpu hotplug not followed until %s reads again: %v\n", OnlineCPUsPath, err)
			s.onlineErr = true
		}
		return
	}
	s.onlineErr = false
	for cpu, e := range s.events {
		if !slices.Contains(online, cpu) || e.stalled() {
			s.dropCPU(cpu, at)
		}
	}
	for _, cpu := range online {
		if !s.wants(cpu) || s.events[cpu] != nil {
			continue
		}
		if err := s.openCPU(cpu, true); err != nil {
			if !s.failed[cpu] {
				if s.failed == nil {
					s.failed = map[int]bool{}
				}
				s.verbosef("gprofile: cpu%d is online but not sampled yet (retrying every %v): %v\n", cpu, hotplugInterval, err)
				s.failed[cpu] = true
			}
			continue
		}
		delete(s.failed, cpu)
		s.addChange(CPUChange{CPU: cpu, Online: true, At: at})
		s.verbosef("gprofile: cpu%d online at %.1f s: sampling it\n", cpu, at.Seconds())
	}
}

// dropCPU closes the event of cpu, gone offline; s.mu is held.
func (s *Sampler) dropCPU(cpu int, at time.Duration) {
	if err := s.events[cpu].close(); err != nil {
		s.verbosef("gprofile: close the perf event of cpu%d: %v\n", cpu, err)
	}
	delete(s.events, cpu)
	s.cpus = slices.DeleteFunc(s.cpus, func(c int) bool { return c == cpu })
	s.addChange(CPUChange{CPU: cpu, At: at})
	s.verbosef("gprofile: cpu%d offline at %.1f s: its perf event is closed\n", cpu, at.Seconds())
}

// errAttach wraps openCPU's errors past perf_event_open.
var errAttach = errors.New("attach BPF program to the perf event")

// openCPU opens the sampling event on cpu with s.attr(), attaches the
// program, enables it when enable is set, and records it in s.events and
// s.cpus; s.mu is held (or Open runs). A perf_event_open error is
// returned as is, the others wrap errAttach. On error nothing stays open.
func (s *Sampler) openCPU(cpu int, enable bool) error {
	fd, err := openPerfEvent(s.attr(), cpu)
	if err != nil {
		return err
	}
	e := &cpuEvent{fd: fd}
	if e.link, err = s.attachProgram(fd); err != nil {
		e.close()
		return fmt.Errorf("%w on cpu %d: %w", errAttach, cpu, err)
	}
	if enable {
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			e.close()
			return fmt.Errorf("%w on cpu %d: enable: %w", errAttach, cpu, err)
		}
		e.mark()
	}
	if s.events == nil {
		s.events = map[int]*cpuEvent{}
	}
	s.events[cpu] = e
	if i, found := slices.BinarySearch(s.cpus, cpu); !found {
		s.cpus = slices.Insert(s.cpus, i, cpu)
	}
	return nil
}

// SummarizeHotplug describes changes, one line per CPU in the order
// first seen, without a trailing newline: "cpu1 went offline at 3.0 s,
// back at 5.0 s: re-attached", "cpu2 came online at 4.0 s: sampled from
// then", "cpu1 went offline at 3.0 s: not sampled since". Times are
// seconds since sampling was enabled.
func SummarizeHotplug(changes []CPUChange) []string {
	var order []int
	byCPU := map[int][]CPUChange{}
	for _, c := range changes {
		if byCPU[c.CPU] == nil {
			order = append(order, c.CPU)
		}
		byCPU[c.CPU] = append(byCPU[c.CPU], c)
	}
	lines := make([]string, 0, len(order))
	for _, cpu := range order {
		var b strings.Builder
		fmt.Fprintf(&b, "cpu%d", cpu)
		cs := byCPU[cpu]
		for i, c := range cs {
			switch {
			case !c.Online:
				fmt.Fprintf(&b, "%s at %.1f s", offline(i), c.At.Seconds())
			case i == 0:
				fmt.Fprintf(&b, " came online at %.1f s", c.At.Seconds())
			default:
				fmt.Fprintf(&b, ", back at %.1f s", c.At.Seconds())
			}
		}
		switch last := cs[len(cs)-1]; {
		case !last.Online:
			b.WriteString(": not sampled since")
		case len(cs) == 1:
			b.WriteString(": sampled from then")
		default:
			b.WriteString(": re-attached")
		}
		lines = append(lines, b.String())
	}
	return lines
}

// offline names the i-th change of a CPU, an offline one.
func offline(i int) string {
	if i == 0 {
		return " went offline"
	}
	return ", offline again"
}
