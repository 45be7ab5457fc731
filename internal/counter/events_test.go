package counter

import (
	"errors"
	"strings"
	"testing"

	"github.com/gprofile/gprofile/internal/attach"
)

func TestParseList(t *testing.T) {
	specs, err := ParseList("page-faults,{task-clock,cs},branches", attach.ParseEvent)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name, canon string
		group       int
	}{{"page-faults", "page-faults", 0}, {"task-clock", "task-clock", 1}, {"cs", "context-switches", 1}, {"branches", "branch-instructions", 3}}
	if len(specs) != len(want) {
		t.Fatalf("got %d specs, want %d", len(specs), len(want))
	}
	for i, w := range want {
		s := specs[i]
		if s.Name != w.name || s.Event.Name != w.canon || s.Group != w.group {
			t.Errorf("spec %d = %q %q group %d; want %q %q group %d", i, s.Name, s.Event.Name, s.Group, w.name, w.canon, w.group)
		}
	}
	if !specs[1].Leader(1) || specs[2].Leader(2) {
		t.Error("leaders wrong")
	}
	for _, bad := range []string{"", "{a", "a}", "{{cs}}", "cs,,cs", "{cs,{cs}}"} {
		if _, err := ParseList(bad, attach.ParseEvent); err == nil {
			t.Errorf("ParseList(%q) accepted", bad)
		}
	}
	if _, err := ParseList("no-such-event", attach.ParseEvent); !errors.Is(err, attach.ErrUnknownEvent) {
		t.Errorf("unknown event: %v", err)
	}
}

func TestAttr(t *testing.T) {
	specs, err := ParseList("{task-clock,page-faults}", attach.ParseEvent)
	if err != nil {
		t.Fatal(err)
	}
	lead := Attr(specs, 0, Target{PID: 1, Exec: true})
	const want = 1<<0 | 1<<1 | 1<<12 | 1<<20 // disabled, inherit, enable_on_exec, exclude_guest
	if lead.Bits != want || lead.Read_format != readFormat {
		t.Errorf("leader bits %#x read_format %#x; want %#x %#x", lead.Bits, lead.Read_format, want, readFormat)
	}
	member := Attr(specs, 1, Target{PID: 1, Exec: true})
	if member.Bits != 1<<1|1<<20 {
		t.Errorf("member bits %#x: a member follows its leader (no disabled, no enable_on_exec)", member.Bits)
	}
	if cpu := Attr(specs, 0, Target{CPUs: []int{0}}); cpu.Bits != 1<<0|1<<20 {
		t.Errorf("-a bits %#x: no inherit, no enable_on_exec", cpu.Bits)
	}
}

// TestWriteAttr: -v prints perf stat's attr for a command field by field,
// with the open call (attach.WriteAttr, shared with sampling's -v).
func TestWriteAttr(t *testing.T) {
	specs, err := ParseList("{task-clock,page-faults}", attach.ParseEvent)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	attach.WriteAttr(&b, Attr(specs, 0, Target{PID: 123, Exec: true}), 123, -1, -1)
	attach.WriteAttr(&b, Attr(specs, 1, Target{PID: 123, Exec: true}), 123, -1, 5)
	for _, want := range []string{
		"perf_event_attr (pid 123):\n",
		"  read_format                      3\n",
		"  enable_on_exec                   1\n",
		"  exclude_guest                    1\n",
		"  perf_event_open(pid 123, cpu -1, group_fd -1, flags FD_CLOEXEC)\n",
		"  perf_event_open(pid 123, cpu -1, group_fd 5, flags FD_CLOEXEC)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("attr dump lacks %q:\n%s", want, b.String())
		}
	}
}
