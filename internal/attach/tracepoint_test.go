package attach

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/gprofile/gprofile/internal/testutil"
)

// newtaskFormat is task/task_newtask's format file on Linux 6.18 (x86-64).
const newtaskFormat = `name: task_newtask
ID: 205
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:pid_t pid;	offset:8;	size:4;	signed:1;
	field:char comm[16];	offset:12;	size:16;	signed:0;
	field:u64 clone_flags;	offset:32;	size:8;	signed:0;
	field:short oom_score_adj;	offset:40;	size:2;	signed:1;

print fmt: "pid=%d comm=%s clone_flags=%llx oom_score_adj=%hd", REC->pid, REC->comm, REC->clone_flags, REC->oom_score_adj
`

// TestCheckFields checks the format file parser against the fields
// follow_fork reads: the running layout passes; a moved, resized or
// missing field fails, naming it.
func TestCheckFields(t *testing.T) {
	if err := checkFields("task/task_newtask", newtaskFormat, newtaskFields); err != nil {
		t.Errorf("Linux 6.18's format: %v", err)
	}
	if f, ok := formatField(newtaskFormat, "comm"); !ok || f != (traceField{"comm", 12, 16}) {
		t.Errorf("comm[16]: %+v, %v", f, ok)
	}
	for _, c := range []struct{ old, new, want string }{
		{"offset:32;	size:8", "offset:28;	size:8", "clone_flags at offset 28"},
		{"u64 clone_flags;	offset:32;	size:8", "u32 clone_flags;	offset:32;	size:4", "clone_flags at offset 32, 4 bytes"},
		{"field:pid_t pid;", "field:pid_t child_pid;", "no field pid"},
	} {
		format := strings.Replace(newtaskFormat, c.old, c.new, 1)
		err := checkFields("task/task_newtask", format, newtaskFields)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q -> %q: error %v, want one saying %q", c.old, c.new, err, c.want)
		}
	}
}

// TestProfileNeedsNoKernelBTF checks that loading the sampler's BPF
// object cannot make cilium/ebpf decode kernel BTF (25-30 ms of CPU):
// it has only perf_event (profile, and profile_loop, whose bpf_loop
// callbacks are subprograms of its own), kprobe, classic and raw
// tracepoint programs (no tp_btf or iterator, which resolve their target
// in kernel BTF; fentry and fexit only for kernel probes on a kernel
// without kprobes, loaded apart), and no CO-RE relocation or kfunc call.
func TestProfileNeedsNoKernelBTF(t *testing.T) {
	spec, err := loadProfile()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"profile": "", "profile_loop": "", "profile_tp": "",
		"follow_fork": "task/task_newtask", "start_at_exec": "sched_process_exec",
		"report_exit":    "sched_process_exit",
		"profile_kprobe": "", "profile_kprobe_multi": "", "profile_fentry": "", "profile_fexit": "",
	}
	for name, p := range spec.Programs {
		tracing := p.Type == ebpf.Tracing && (name == "profile_fentry" || name == "profile_fexit")
		if p.Type != ebpf.PerfEvent && p.Type != ebpf.TracePoint && p.Type != ebpf.RawTracepoint && p.Type != ebpf.Kprobe && !tracing {
			t.Errorf("program %s is a %s program", name, p.Type)
		}
		if to, ok := want[name]; !ok || p.AttachTo != to {
			t.Errorf("program %s attaches to %q, want %q", name, p.AttachTo, to)
		}
		for i, ins := range p.Instructions {
			if btf.CORERelocationMetadata(&ins) != nil {
				t.Errorf("program %s, instruction %d: CO-RE relocation %v", name, i, ins)
			}
			if ins.IsKfuncCall() {
				t.Errorf("program %s, instruction %d: kfunc call %v", name, i, ins)
			}
		}
	}
	if len(spec.Programs) != len(want) {
		t.Errorf("%d programs, want %d", len(spec.Programs), len(want))
	}
}

// TestSamplerForkFormatMismatch: when task_newtask's record is not laid
// out as follow_fork reads it, Open follows forks with the raw tracepoint
// instead, saying why in the verbose output.
func TestSamplerForkFormatMismatch(t *testing.T) {
	testutil.RequirePrivileges(t)
	root := t.TempDir()
	dir := filepath.Join(root, "events", "task", "task_newtask")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	format := strings.Replace(newtaskFormat, "offset:32;", "offset:28;", 1)
	if err := os.WriteFile(filepath.Join(dir, "format"), []byte(format), 0o644); err != nil {
		t.Fatal(err)
	}
	saved := hostEvents
	defer func() { hostEvents = saved }()
	hostEvents.tracefs = []string{root}

	var notes, verbose bytes.Buffer
	s, err := Open(Config{FrequencyHz: 99, SoftwareEvent: true, PIDs: []uint32{uint32(os.Getpid())}, Log: &notes, Verbose: &verbose})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if notes.Len() != 0 {
		t.Errorf("notes %q, want none", notes.String())
	}
	want := "following forks with a raw tracepoint (tracepoint task/task_newtask: field clone_flags at offset 28"
	if !strings.Contains(verbose.String(), want) {
		t.Errorf("verbose output %q, want one containing %q", verbose.String(), want)
	}
}
