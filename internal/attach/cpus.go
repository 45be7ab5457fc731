package attach

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// OnlineCPUsPath is the sysfs file that lists the online CPUs.
const OnlineCPUsPath = "/sys/devices/system/cpu/online"

// OnlineCPUs returns the ids of the online CPUs, ascending, from
// /sys/devices/system/cpu/online.
func OnlineCPUs() ([]int, error) {
	b, err := os.ReadFile(OnlineCPUsPath)
	if err != nil {
		return nil, fmt.Errorf("read online cpus: %w", err)
	}
	return parseOnline(b)
}

// parseOnline parses the contents of OnlineCPUsPath.
func parseOnline(b []byte) ([]int, error) {
	cpus, err := ParseCPUList(string(b))
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", OnlineCPUsPath, err)
	}
	return cpus, nil
}

// onlineFile reads OnlineCPUsPath through a descriptor kept open, with
// one pread a look, where OnlineCPUs opens, reads and closes it (and
// registers it with the runtime's poller, as sysfs files are pollable):
// the hotplug watcher looks every hotplugInterval for the whole run
// (BenchmarkOnlineCPUs).
type onlineFile struct {
	fd   int // valid when open
	open bool
	buf  [256]byte
}

// read returns the online CPUs, as OnlineCPUs does. A read that fails
// closes the descriptor, and the next read opens it again; a list longer
// than the buffer is read by OnlineCPUs.
func (o *onlineFile) read() ([]int, error) {
	if !o.open {
		fd, err := unix.Open(OnlineCPUsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("read online cpus: %w", &os.PathError{Op: "open", Path: OnlineCPUsPath, Err: err})
		}
		o.fd, o.open = fd, true
	}
	n, err := unix.Pread(o.fd, o.buf[:], 0)
	if err != nil {
		o.close()
		return nil, fmt.Errorf("read online cpus: %w", &os.PathError{Op: "read", Path: OnlineCPUsPath, Err: err})
	}
	if n == len(o.buf) {
		return OnlineCPUs()
	}
	return parseOnline(o.buf[:n])
}

// close closes the descriptor, if open.
func (o *onlineFile) close() {
	if o.open {
		unix.Close(o.fd)
		o.open = false
	}
}

// ParseCPUList parses a kernel CPU list such as "0-3,5,7-8" (the format of
// /sys/devices/system/cpu/online and of perf's -C) into ascending,
// de-duplicated CPU ids. Surrounding white space is ignored; an empty list
// is an error.
func ParseCPUList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("empty cpu list")
	}
	seen := map[int]bool{}
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, err := parseCPURange(strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		for c := lo; c <= hi; c++ {
			if !seen[c] {
				seen[c] = true
				cpus = append(cpus, c)
			}
		}
	}
	slices.Sort(cpus)
	return cpus, nil
}

const maxCPU = 1 << 16

func parseCPURange(part string) (lo, hi int, err error) {
	a, b, isRange := strings.Cut(part, "-")
	if lo, err = strconv.Atoi(a); err != nil || lo < 0 || lo >= maxCPU {
		return 0, 0, fmt.Errorf("bad cpu %q in cpu list", part)
	}
	if !isRange {
		return lo, lo, nil
	}
	if hi, err = strconv.Atoi(b); err != nil || hi < lo || hi >= maxCPU {
		return 0, 0, fmt.Errorf("bad cpu range %q in cpu list", part)
	}
	return lo, hi, nil
}
