package main

import (
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/google/pprof/profile"

	"github.com/gprofile/gprofile/internal/output"
)

// containerID matches a container's cgroup directory: docker-ID.scope,
// cri-containerd-ID.scope, crio-ID.scope, libpod-ID.scope, or the bare
// 64-hex ID (cgroupfs drivers).
// It is compiled on first use, not at every start of gprofile.
var containerID = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^(?:[a-z-]+-)?([0-9a-f]{64})(?:\.scope)?$`)
})

// serviceOfCgroup returns the service a cgroup v2 path stands for: the
// short (12-hex) ID of the innermost container, else the innermost
// systemd service unit without ".service" (/system.slice/nginx.service:
// nginx), else "" (a session scope, the root).
func serviceOfCgroup(cg string) string {
	parts := strings.Split(strings.Trim(cg, "/"), "/")
	for i := len(parts) - 1; i >= 0; i-- {
		if m := containerID().FindStringSubmatch(parts[i]); m != nil {
			return m[1][:12]
		}
	}
	for i := len(parts) - 1; i >= 0; i-- {
		p := parts[i]
		if name, ok := strings.CutSuffix(p, ".service"); ok && name != "" && !strings.HasPrefix(p, "user@") {
			return name
		}
	}
	return ""
}

// serviceNamer names the service of a sample: --service when given, else
// its cgroup's (serviceOfCgroup), else its process's name
// (/proc/PID/comm, read once per pid and profile), else its thread's
// comm label.
type serviceNamer struct {
	fixed    string
	procRoot string            // /proc
	comms    map[int64]string  // pid -> process name
	cgroups  map[string]string // cgroup path -> service
}

func newServiceNamer(fixed string) *serviceNamer {
	return &serviceNamer{fixed: fixed, procRoot: "/proc", comms: map[int64]string{}, cgroups: map[string]string{}}
}

// of returns the service of s.
func (n *serviceNamer) of(s *profile.Sample) string {
	if n.fixed != "" {
		return n.fixed
	}
	if cg := s.Label[output.LabelCgroup]; len(cg) > 0 {
		svc, ok := n.cgroups[cg[0]]
		if !ok {
			svc = serviceOfCgroup(cg[0])
			n.cgroups[cg[0]] = svc
		}
		if svc != "" {
			return svc
		}
	}
	if pid := s.NumLabel[output.LabelPID]; len(pid) > 0 && pid[0] > 0 {
		name, ok := n.comms[pid[0]]
		if !ok {
			data, _ := os.ReadFile(path.Join(n.procRoot, strconv.FormatInt(pid[0], 10), "comm"))
			name = strings.TrimSpace(string(data))
			n.comms[pid[0]] = name
		}
		if name != "" {
			return name
		}
	}
	if c := s.Label[output.LabelComm]; len(c) > 0 && c[0] != "" {
		return c[0]
	}
	return "unknown"
}

// splitServices returns p's samples by service, each service's its own
// profile with only the locations, functions and mappings its samples
// use (output.SplitPprof: the parts share them with p), sorted by
// service; p itself when all are of one service. The caches of n are
// cleared first: a pid may be another process by the next interval.
func splitServices(p *profile.Profile, n *serviceNamer) []output.Part {
	clear(n.comms)
	if len(n.cgroups) > 4096 {
		clear(n.cgroups)
	}
	return output.SplitPprof(p, n.of)
}
