package attach

import (
	"errors"

	"golang.org/x/sys/unix"
)

// TargetsAlive reports whether any target process is still alive: the
// pids of Config.PIDs and the processes they forked while sampling ran
// (the BPF targets map), each checked with kill(pid, 0). It is false
// when no target remains, as `perf record -p` stops then; a sampler
// without Config.PIDs always has targets (the whole system).
func (s *Sampler) TargetsAlive() (bool, error) {
	if s.cfg.PIDs == nil {
		return true, nil
	}
	var pid uint32
	var state uint8
	it := s.objs.Targets.Iterate()
	for it.Next(&pid, &state) {
		if err := unix.Kill(int(pid), 0); !errors.Is(err, unix.ESRCH) {
			return true, nil
		}
	}
	return false, it.Err()
}
