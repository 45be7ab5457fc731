package preflight

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
)

// Host says where the checks read the machine: the real one
// (DefaultHost), or fake trees in tests.
type Host struct {
	Proc, Sys string              // mount points of procfs and sysfs
	Getenv    func(string) string // the environment (DEBUGINFOD_URLS)
	Euid      int                 // effective user id (0: root)
	// RingBuf probes BPF ring buffer support: nil when the kernel has
	// it, an error wrapping ebpf.ErrNotSupported when not.
	RingBuf func() error
}

// DefaultHost is this machine, as this process sees it.
func DefaultHost() Host {
	return Host{Proc: "/proc", Sys: "/sys", Getenv: os.Getenv, Euid: os.Geteuid(),
		RingBuf: func() error { return features.HaveMapType(ebpf.RingBuf) }}
}

// Linux capability numbers (linux/capability.h).
const (
	capSysPtrace         = 19
	capSysAdmin          = 21
	capSyslog            = 34
	capPerfmon           = 38
	capBPF               = 39
	capCheckpointRestore = 40
)

// capability is one capability gprofile uses and what for.
type capability struct {
	bit  uint
	name string
	for_ string
}

var capabilities = []capability{
	{capBPF, "CAP_BPF", "load the BPF programs"},
	{capPerfmon, "CAP_PERFMON", "open perf events on every CPU"},
	{capSyslog, "CAP_SYSLOG", "read kernel symbol addresses"},
	{capSysPtrace, "CAP_SYS_PTRACE", "read other users' processes"},
	{capCheckpointRestore, "CAP_CHECKPOINT_RESTORE", "open deleted binaries through /proc/PID/map_files"},
}

// System checks the machine, one Item per check, in a fixed order.
func (h Host) System() []Item {
	caps, capsErr := h.effectiveCaps()
	has := func(bit uint) bool {
		return capsErr == nil && (caps&(1<<bit) != 0 || (bit != capSyslog && bit != capSysPtrace && caps&(1<<capSysAdmin) != 0))
	}
	btf := h.exists(h.Sys, "kernel/btf/vmlinux")
	return []Item{
		h.privileges(caps, capsErr, has),
		h.paranoid(has(capPerfmon)),
		h.kptrRestrict(has(capSyslog)),
		h.lockdown(),
		btfItem(btf),
		h.ringBuffer(),
		h.tracefs(has(capSysAdmin), btf),
		h.pmu(),
		h.maxSampleRate(),
		h.maxStack(),
		h.cgroup2(),
		h.debuginfod(),
	}
}

// effectiveCaps reads CapEff from <proc>/self/status.
func (h Host) effectiveCaps() (uint64, error) {
	b, err := os.ReadFile(filepath.Join(h.Proc, "self/status"))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("no CapEff line")
}

func (h Host) privileges(caps uint64, err error, has func(uint) bool) Item {
	it := Item{Name: "privileges"}
	if err != nil {
		it.Status, it.Detail = Warn, fmt.Sprintf("cannot read the capabilities (%v)", err)
		return it
	}
	var missing, why []string
	for _, c := range capabilities {
		if !has(c.bit) {
			missing = append(missing, c.name)
			why = append(why, c.for_)
		}
	}
	who := "not root"
	if h.Euid == 0 {
		who = "root"
	}
	if len(missing) == 0 {
		it.Detail = who + ", with CAP_BPF, CAP_PERFMON, CAP_SYSLOG, CAP_SYS_PTRACE and CAP_CHECKPOINT_RESTORE"
		return it
	}
	it.Status = Warn
	it.Detail = fmt.Sprintf("%s, without %s (needed to %s)", who, join(missing), join(why))
	it.Fix = "run gprofile as root (sudo gprofile), or: sudo setcap cap_bpf,cap_perfmon,cap_syslog,cap_sys_ptrace,cap_checkpoint_restore+ep $(command -v gprofile)"
	return it
}

// sysctl reads /proc/sys/kernel/<name> as an integer.
func (h Host) sysctl(name string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(h.Proc, "sys/kernel", name))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

func (h Host) paranoid(perfmon bool) Item {
	it := Item{Name: "perf_event_paranoid"}
	v, err := h.sysctl("perf_event_paranoid")
	switch {
	case err != nil:
		it.Status, it.Detail = Warn, fmt.Sprintf("cannot read kernel.perf_event_paranoid (%v): no perf events?", err)
	case perfmon:
		it.Detail = fmt.Sprintf("%d (CAP_PERFMON overrides it)", v)
	case v > -1:
		it.Status, it.Detail = Warn, fmt.Sprintf("%d: without CAP_PERFMON, perf events on every CPU need -1", v)
		it.Fix = "sudo sysctl kernel.perf_event_paranoid=-1, or run as root"
	default:
		it.Detail = strconv.FormatInt(v, 10)
	}
	return it
}

func (h Host) kptrRestrict(syslog bool) Item {
	it := Item{Name: "kptr_restrict"}
	v, err := h.sysctl("kptr_restrict")
	switch {
	case err != nil:
		it.Status, it.Detail = Note, fmt.Sprintf("cannot read kernel.kptr_restrict (%v)", err)
	case v == 0:
		it.Detail = "0: kernel addresses readable"
	case v == 1 && syslog:
		it.Detail = "1: kernel addresses readable with CAP_SYSLOG"
	default:
		it.Status = Warn
		it.Detail = fmt.Sprintf("%d: kernel addresses hidden from this process: kernel frames go unnamed", v)
		if v == 1 {
			it.Fix = "run as root (CAP_SYSLOG)"
		} else {
			it.Fix = "sudo sysctl kernel.kptr_restrict=1"
		}
	}
	return it
}

func (h Host) lockdown() Item {
	it := Item{Name: "lockdown"}
	b, err := os.ReadFile(filepath.Join(h.Sys, "kernel/security/lockdown"))
	if err != nil {
		it.Detail = "not enabled (no securityfs lockdown file)"
		return it
	}
	mode := "none"
	for _, f := range strings.Fields(string(b)) {
		if strings.HasPrefix(f, "[") {
			mode = strings.Trim(f, "[]")
		}
	}
	switch mode {
	case "none":
		it.Detail = "none"
	case "integrity":
		it.Detail = "integrity (BPF may still read kernel memory)"
	default:
		it.Status = Warn
		it.Detail = mode + ": BPF may not read kernel memory, so kernel stacks and symbols are lost"
		it.Fix = "boot without lockdown=confidentiality (or with Secure Boot off)"
	}
	return it
}

func btfItem(present bool) Item {
	if present {
		return Item{Name: "kernel BTF", Detail: "/sys/kernel/btf/vmlinux"}
	}
	return Item{Name: "kernel BTF", Status: Warn,
		Detail: "none: --call-graph dwarf, the BPF kernel symbol lookup and fork following without tracefs need it",
		Fix:    "a kernel built with CONFIG_DEBUG_INFO_BTF=y (Debian's is)"}
}

func (h Host) ringBuffer() Item {
	it := Item{Name: "BPF ring buffer"}
	if h.RingBuf == nil {
		it.Detail = "not probed"
		return it
	}
	switch err := h.RingBuf(); {
	case err == nil:
		it.Detail = "supported"
	case errors.Is(err, ebpf.ErrNotSupported):
		it.Status, it.Detail, it.Fix = Warn, "not supported: gprofile needs Linux 5.8 or newer", "a newer kernel"
	default:
		it.Status, it.Detail = Warn, fmt.Sprintf("cannot probe (%v)", err)
		it.Fix = "run as root"
	}
	return it
}

// mounts returns the mount points of each file system type in
// <proc>/self/mounts.
func (h Host) mounts() map[string][]string {
	m := map[string][]string{}
	f, err := os.Open(filepath.Join(h.Proc, "self/mounts"))
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 2 {
			m[fields[2]] = append(m[fields[2]], fields[1])
		}
	}
	return m
}

func (h Host) tracefs(sysAdmin, btf bool) Item {
	it := Item{Name: "tracefs"}
	if at := h.mounts()["tracefs"]; len(at) > 0 {
		it.Detail = "mounted at " + strings.Join(at, ", ")
		return it
	}
	switch {
	case sysAdmin:
		it.Detail = "not mounted; gprofile mounts it at /sys/kernel/tracing when it runs (as perf does)"
	case btf:
		it.Status = Note
		it.Detail = "not mounted, and mounting needs CAP_SYS_ADMIN: forks are followed without it (kernel BTF), but -e tracepoints and -l's list need it"
		it.Fix = "sudo mount -t tracefs nodev /sys/kernel/tracing"
	default:
		it.Status = Warn
		it.Detail = "not mounted, not mountable (no CAP_SYS_ADMIN) and no kernel BTF: processes that targets fork are not followed"
		it.Fix = "sudo mount -t tracefs nodev /sys/kernel/tracing"
	}
	return it
}

func (h Host) pmu() Item {
	for _, pmu := range []string{"cpu", "cpu_core"} {
		if h.exists(h.Sys, "bus/event_source/devices/"+pmu+"/events") {
			return Item{Name: "hardware PMU", Detail: pmu + ": cycles and the other hardware events"}
		}
	}
	return Item{Name: "hardware PMU", Status: Note,
		Detail: "none (a VM?): gprofile samples the cpu-clock timer instead of cycles, the same stacks; -e cycles, cache-misses and the like are not available"}
}

func (h Host) maxSampleRate() Item {
	it := Item{Name: "perf_event_max_sample_rate"}
	v, err := h.sysctl("perf_event_max_sample_rate")
	switch {
	case err != nil:
		it.Status, it.Detail = Note, fmt.Sprintf("cannot read it (%v)", err)
	case v < 99:
		it.Status = Warn
		it.Detail = fmt.Sprintf("%d Hz, below gprofile's default -f 99 (the kernel lowers it when sampling interrupts take too long)", v)
		it.Fix = "sudo sysctl kernel.perf_event_max_sample_rate=100000"
	default:
		it.Detail = fmt.Sprintf("%d Hz: the highest -f", v)
	}
	return it
}

// maxStackDepth is the deepest stack gprofile's BPF program takes
// (MAX_STACK_DEPTH in bpf/profile.bpf.c).
const maxStackDepth = 127

func (h Host) maxStack() Item {
	it := Item{Name: "perf_event_max_stack"}
	v, err := h.sysctl("perf_event_max_stack")
	switch {
	case err != nil:
		it.Status, it.Detail = Note, fmt.Sprintf("cannot read it (%v)", err)
	case v < maxStackDepth:
		it.Status = Warn
		it.Detail = fmt.Sprintf("%d: stacks deeper than %d frames are cut (gprofile takes up to %d)", v, v, maxStackDepth)
		it.Fix = fmt.Sprintf("sudo sysctl kernel.perf_event_max_stack=%d", maxStackDepth)
	default:
		it.Detail = fmt.Sprintf("%d frames", v)
	}
	return it
}

func (h Host) cgroup2() Item {
	if at := h.mounts()["cgroup2"]; len(at) > 0 {
		return Item{Name: "cgroup v2", Detail: "mounted at " + strings.Join(at, ", ")}
	}
	return Item{Name: "cgroup v2", Status: Note, Detail: "not mounted: --cgroup and the cgroup label are not available",
		Fix: "sudo mount -t cgroup2 none /sys/fs/cgroup/unified"}
}

func (h Host) debuginfod() Item {
	if urls := h.Getenv("DEBUGINFOD_URLS"); urls != "" {
		return Item{Name: "debuginfod", Detail: "DEBUGINFOD_URLS=" + urls + " (downloads debug files of binaries without local ones)"}
	}
	return Item{Name: "debuginfod", Status: Note,
		Detail: "DEBUGINFOD_URLS not set: binaries without local debug files keep only their own symbols (under sudo, keep it with sudo --preserve-env=DEBUGINFOD_URLS)",
		Fix:    "export DEBUGINFOD_URLS=URL (your distribution's debuginfod server)"}
}

func (h Host) exists(root, path string) bool {
	_, err := os.Stat(filepath.Join(root, path))
	return err == nil
}
