package attach

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/gprofile/gprofile/internal/privilege"
)

// Errors a user can act on; Open wraps them with the details.
var (
	// ErrPermission: the process may not load BPF programs or open perf
	// events (the one sentinel of [privilege.ErrPermission], which the
	// kernel-symbol package wraps too).
	ErrPermission = privilege.ErrPermission
	// ErrNoRingbuf: the kernel has no BPF ring buffer (Linux < 5.8).
	ErrNoRingbuf = errors.New("this kernel has no BPF ring buffer (BPF_MAP_TYPE_RINGBUF needs Linux 5.8 or newer)")
	// ErrNoPMU: a hardware event was asked for on a machine without a PMU.
	ErrNoPMU = errors.New("no hardware performance counter on this machine (a VM?): sample the software event cpu-clock instead (-e cpu-clock)")
	// ErrNoProcess: a target pid does not exist.
	ErrNoProcess = errors.New("no such process")
	// ErrFrequency: the frequency is 0 or above kernel.perf_event_max_sample_rate.
	ErrFrequency = errors.New("bad sampling frequency")
)

// MaxSampleRatePath holds the highest frequency perf events may sample at.
const MaxSampleRatePath = "/proc/sys/kernel/perf_event_max_sample_rate"

// CheckFrequency returns an error wrapping ErrFrequency when hz is 0 or
// above kernel.perf_event_max_sample_rate (read from /proc/sys; when it
// cannot be read, only 0 is rejected).
func CheckFrequency(hz uint64) error {
	if hz == 0 {
		return fmt.Errorf("%w: frequency must be at least 1 Hz", ErrFrequency)
	}
	b, err := os.ReadFile(MaxSampleRatePath)
	if err != nil {
		return nil
	}
	max, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err == nil && hz > max {
		return fmt.Errorf("%w: %d Hz is above kernel.perf_event_max_sample_rate (%d Hz); "+
			"lower -f or raise the sysctl", ErrFrequency, hz, max)
	}
	return nil
}

// Capabilities that are enough to profile without being root.
const (
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

// CheckPrivileges returns an error wrapping ErrPermission, naming what is
// missing, when the process is neither root nor holds CAP_BPF and
// CAP_PERFMON (or CAP_SYS_ADMIN) in its effective set (/proc/self/status).
func CheckPrivileges() error {
	if os.Geteuid() == 0 {
		return nil
	}
	eff, err := effectiveCaps()
	if err != nil {
		return fmt.Errorf("%w (not root, and reading capabilities failed: %v)", ErrPermission, err)
	}
	if eff&(1<<capSysAdmin) != 0 {
		return nil
	}
	var missing []string
	if eff&(1<<capBPF) == 0 {
		missing = append(missing, "CAP_BPF")
	}
	if eff&(1<<capPerfmon) == 0 {
		missing = append(missing, "CAP_PERFMON")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w (not root; missing %s)", ErrPermission, strings.Join(missing, " and "))
	}
	return nil
}

func effectiveCaps() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("no CapEff line in /proc/self/status")
}

// permissionError wraps err with ErrPermission when it is EPERM or EACCES.
func permissionError(what string, err error) error { return privilege.Wrap(what, err) }

// ProcessTgid returns the process id (tgid) of pid, which may also be a
// thread id, from /proc/PID/status. It returns an error wrapping
// ErrNoProcess when there is no such task.
func ProcessTgid(pid uint32) (uint32, error) {
	if pid == 0 {
		return 0, fmt.Errorf("pid 0: %w (the idle task is sampled with --idle)", ErrNoProcess)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
			tgid, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			if err != nil {
				return 0, fmt.Errorf("pid %d: bad Tgid line %q", pid, line)
			}
			return uint32(tgid), nil
		}
	}
	return 0, fmt.Errorf("pid %d: no Tgid in /proc/%d/status", pid, pid)
}
