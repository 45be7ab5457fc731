// Package privilege holds what the kernel-facing packages (internal/attach
// for sampling, internal/symbolize/ksym for kernel symbols) say when the
// kernel refuses them for lack of privileges: one sentinel, [ErrPermission],
// so that callers test for it with errors.Is whichever package failed.
package privilege

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// ErrPermission: the process may not load BPF programs or open perf
// events. Run as root, or grant CAP_BPF and CAP_PERFMON (Linux 5.8+),
// and check kernel.perf_event_paranoid.
var ErrPermission = errors.New("permission denied: run as root, or grant CAP_BPF and CAP_PERFMON " +
	"(e.g. sudo setcap cap_bpf,cap_perfmon,cap_sys_ptrace+ep gprofile); " +
	"kernel.perf_event_paranoid may need to be lowered (sysctl kernel.perf_event_paranoid=1)")

// Wrap returns err prefixed with what failed ("load BPF program: ..."),
// wrapping [ErrPermission] as well when err is EPERM or EACCES.
func Wrap(what string, err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("%s: %w: %v", what, ErrPermission, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
