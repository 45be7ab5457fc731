package attach

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// TracefsMountPoint is where tracefs is mounted when no tracefs is found
// (as perf's tracefs__mount does): /sys/kernel/tracing, which sysfs
// creates empty on kernels built with tracing.
const TracefsMountPoint = "/sys/kernel/tracing"

// mountedTracefs records that this process mounted tracefs (see
// MountedTracefs).
var mountedTracefs atomic.Bool

// mountTracefs mounts tracefs at dir. It needs CAP_SYS_ADMIN in the mount
// namespace and a writable /sys; the mount stays after gprofile exits, as
// perf's does, and later runs find it.
func mountTracefs(dir string) error {
	if err := unix.Mount("nodev", dir, "tracefs", 0, ""); err != nil {
		return fmt.Errorf("mount -t tracefs nodev %s: %w", dir, err)
	}
	mountedTracefs.Store(true)
	return nil
}

// MountedTracefs reports whether this process mounted tracefs at
// TracefsMountPoint because none was mounted.
func MountedTracefs() bool { return mountedTracefs.Load() }

// TracefsEvents returns the events directory of tracefs
// (/sys/kernel/tracing/events or /sys/kernel/debug/tracing/events),
// mounting tracefs at TracefsMountPoint first when it is mounted at
// neither. Errors wrap ErrNoTracefs when it is not mounted and cannot be
// (the error says why), or fs.ErrPermission when it may not be read.
func TracefsEvents() (string, error) { return hostEvents.eventsDir() }

// followForksRaw follows the processes targets fork, and reports new
// processes (ReportExits), with a raw tracepoint on task_newtask
// (bpf/follow.bpf.c), for when the classic tracepoint cannot be used:
// tracefs, which gives its id and record layout, is not there (why says
// what failed). The program reads the child's tgid with a CO-RE
// relocation, so loading it decodes kernel BTF (/sys/kernel/btf/vmlinux);
// it shares the sampler's targets, counters and events maps. Unlike the
// classic program it applies no cgroup or thread filter to the fork
// records: they are hints the reader keeps in a bounded table.
func (s *Sampler) followForksRaw(why error) error {
	spec, err := loadFollow()
	if err != nil {
		return err
	}
	// The map specs must match the maps they are replaced by, whatever
	// size the sampler gave them.
	shared := map[string]*ebpf.Map{"targets": s.objs.Targets, "counters": s.objs.Counters, "events": s.objs.Events}
	for name, m := range shared {
		spec.Maps[name].MaxEntries = m.MaxEntries()
	}
	var vars struct {
		FollowForks *ebpf.VariableSpec `ebpf:"follow_forks"`
		ReportForks *ebpf.VariableSpec `ebpf:"report_forks"`
	}
	if err := spec.Assign(&vars); err != nil {
		return fmt.Errorf("BPF object and its bindings differ (make generate): %w", err)
	}
	if err := vars.FollowForks.Set(boolByte(s.cfg.PIDs != nil)); err != nil {
		return err
	}
	if err := vars.ReportForks.Set(boolByte(s.cfg.ReportExits)); err != nil {
		return err
	}
	var progs struct {
		FollowForkRaw *ebpf.Program `ebpf:"follow_fork_raw"`
	}
	opts := &ebpf.CollectionOptions{MapReplacements: shared}
	if err := spec.LoadAndAssign(&progs, opts); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) && s.cfg.Verbose != nil {
			fmt.Fprintf(s.cfg.Verbose, "BPF verifier log:\n%+v\n", ve)
		}
		return permissionError("load the raw task_newtask program (needs kernel BTF)", err)
	}
	defer progs.FollowForkRaw.Close()
	if err := s.attachTracepoint(progs.FollowForkRaw, spec.Programs["follow_fork_raw"].AttachTo); err != nil {
		return err
	}
	s.verbosef("BPF: following forks with a raw tracepoint (%v)\n", why)
	return nil
}
