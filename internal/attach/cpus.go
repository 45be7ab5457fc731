package attach

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
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
	cpus, err := ParseCPUList(string(b))
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", OnlineCPUsPath, err)
	}
	return cpus, nil
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
