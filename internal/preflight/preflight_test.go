package preflight

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/gprofile/gprofile/internal/testutil"
)

// fakeHost builds /proc and /sys trees with the given files (paths
// relative to the tree, "proc/..." or "sys/...") over a complete,
// healthy machine's.
func fakeHost(t *testing.T, files map[string]string, env map[string]string, ringbuf error) Host {
	t.Helper()
	root := t.TempDir()
	base := map[string]string{
		"proc/self/status":                               "Name:\tgprofile\nCapEff:\t000001ffffffffff\n",
		"proc/self/mounts":                               "tracefs /sys/kernel/tracing tracefs rw 0 0\ncgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n",
		"proc/sys/kernel/perf_event_paranoid":            "2\n",
		"proc/sys/kernel/kptr_restrict":                  "0\n",
		"proc/sys/kernel/perf_event_max_sample_rate":     "100000\n",
		"proc/sys/kernel/perf_event_max_stack":           "127\n",
		"sys/kernel/btf/vmlinux":                         "btf",
		"sys/kernel/security/lockdown":                   "[none] integrity confidentiality\n",
		"sys/bus/event_source/devices/cpu/events/cycles": "event=0x3c\n",
	}
	for k, v := range files {
		base[k] = v
	}
	for k, v := range base {
		if v == "" {
			continue // absent
		}
		p := filepath.Join(root, k)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if env == nil {
		env = map[string]string{"DEBUGINFOD_URLS": "https://debuginfod.example"}
	}
	return Host{Proc: filepath.Join(root, "proc"), Sys: filepath.Join(root, "sys"), Getenv: func(k string) string { return env[k] },
		RingBuf: func() error { return ringbuf }}
}

// TestSystemHealthy: a machine with everything passes every check, and
// Write says a profile would be complete.
func TestSystemHealthy(t *testing.T) {
	items := fakeHost(t, nil, nil, nil).System()
	var out bytes.Buffer
	if !Write(&out, items) {
		t.Errorf("a healthy machine is not complete:\n%s", out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 13 || lines[12] != "gprofile check: a profile would be complete" {
		t.Errorf("%d lines, want 12 items and the verdict:\n%s", len(lines), out.String())
	}
	for _, l := range lines[:12] {
		if !strings.HasPrefix(l, "ok    ") {
			t.Errorf("line %q is not ok", l)
		}
	}
}

// TestSystemProblems: each thing a machine can lack is a warn line naming
// it, with its fix, and makes the verdict incomplete; a note does not.
func TestSystemProblems(t *testing.T) {
	for _, c := range []struct {
		name    string
		files   map[string]string
		env     map[string]string
		ringbuf error
		status  Status
		want    string
	}{
		{"privileges", map[string]string{"proc/self/status": "CapEff:\t0000000000000000\n"}, nil, nil, Warn, "without CAP_BPF, CAP_PERFMON, CAP_SYSLOG, CAP_SYS_PTRACE and CAP_CHECKPOINT_RESTORE"},
		{"perf_event_paranoid", map[string]string{"proc/self/status": "CapEff:\t0000000000000000\n"}, nil, nil, Warn, "sudo sysctl kernel.perf_event_paranoid=-1"},
		{"kptr_restrict", map[string]string{"proc/sys/kernel/kptr_restrict": "2\n"}, nil, nil, Warn, "sudo sysctl kernel.kptr_restrict=1"},
		{"lockdown", map[string]string{"sys/kernel/security/lockdown": "none integrity [confidentiality]\n"}, nil, nil, Warn, "BPF may not read kernel memory"},
		{"kernel BTF", map[string]string{"sys/kernel/btf/vmlinux": ""}, nil, nil, Warn, "CONFIG_DEBUG_INFO_BTF=y"},
		{"BPF ring buffer", nil, nil, fmt.Errorf("ring buffer: %w", ebpf.ErrNotSupported), Warn, "Linux 5.8 or newer"},
		{"tracefs", map[string]string{"proc/self/mounts": "cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n", "proc/self/status": "CapEff:\t000000c000000000\n", "sys/kernel/btf/vmlinux": ""}, nil, nil, Warn, "sudo mount -t tracefs nodev /sys/kernel/tracing"},
		{"hardware PMU", map[string]string{"sys/bus/event_source/devices/cpu/events/cycles": ""}, nil, nil, Note, "cpu-clock"},
		{"perf_event_max_sample_rate", map[string]string{"proc/sys/kernel/perf_event_max_sample_rate": "50\n"}, nil, nil, Warn, "sudo sysctl kernel.perf_event_max_sample_rate=100000"},
		{"perf_event_max_stack", map[string]string{"proc/sys/kernel/perf_event_max_stack": "64\n"}, nil, nil, Warn, "sudo sysctl kernel.perf_event_max_stack=127"},
		{"cgroup v2", map[string]string{"proc/self/mounts": "tracefs /sys/kernel/tracing tracefs rw 0 0\n"}, nil, nil, Note, "--cgroup"},
		{"debuginfod", nil, map[string]string{}, nil, Note, "export DEBUGINFOD_URLS="},
	} {
		items := fakeHost(t, c.files, c.env, c.ringbuf).System()
		var got *Item
		for i := range items {
			if items[i].Name == c.name {
				got = &items[i]
			}
		}
		if got == nil {
			t.Errorf("%s: no item", c.name)
			continue
		}
		if got.Status != c.status || !strings.Contains(got.Detail+"; fix: "+got.Fix, c.want) {
			t.Errorf("%s: %+v, want %v saying %q", c.name, *got, c.status, c.want)
		}
		var out bytes.Buffer
		if complete := Write(&out, items); complete != (c.status != Warn) {
			t.Errorf("%s: complete %v with a %v:\n%s", c.name, complete, c.status, out.String())
		}
	}
}

// TestProcessBinaries checks the binaries of a live process: a program
// built with frame pointers and DWARF is complete; the same stripped,
// without frame pointers or unwind tables, is a warn line saying that
// stacks through it are cut and it has only exported symbols.
func TestProcessBinaries(t *testing.T) {
	full := testutil.BuildC(t, "testdata/spin.c", "-O1", "-g", "-fno-omit-frame-pointer")
	bare := testutil.BuildC(t, "testdata/spin.c", "-O1", "-fomit-frame-pointer", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables", "-s")
	// The C runtime's objects bring .eh_frame along: remove it.
	objcopy := testutil.RequireTool(t, "objcopy")
	if out, err := exec.Command(objcopy, "--remove-section=.eh_frame", "--remove-section=.eh_frame_hdr", bare).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v\n%s", err, out)
	}
	for _, c := range []struct {
		bin    string
		status Status
		want   []string
	}{
		{full, OK, []string{"frame pointers (", ", CFI, symbols, DWARF in the file"}},
		{bare, Warn, []string{"no CFI", "only exported symbols (.dynsym)", "no debug info", "stacks through it are cut"}},
	} {
		cmd := exec.Command(c.bin)
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Start returns once the child has begun its exec, which may be
		// before the kernel has mapped the new program: wait for it to run.
		if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
			t.Fatalf("%s: %q, %v; want ready", c.bin, line, err)
		}
		items, err := DefaultHost().Process(cmd.Process.Pid)
		in.Write([]byte("x\n"))
		cmd.Wait()
		if err != nil {
			t.Fatal(err)
		}
		var got *Item
		for i := range items {
			if items[i].Name == c.bin {
				got = &items[i]
			}
		}
		if got == nil {
			t.Fatalf("no item for %s in %+v", c.bin, items)
		}
		for _, w := range c.want {
			if got.Status != c.status || !strings.Contains(got.Detail, w) {
				t.Errorf("%s: %+v, want %v saying %q", filepath.Base(c.bin), *got, c.status, w)
			}
		}
	}
	if _, err := DefaultHost().Process(1 << 30); err == nil {
		t.Error("Process of a missing pid succeeded")
	}
}
