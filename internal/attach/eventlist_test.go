package attach

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gprofile/gprofile/internal/testutil"
)

// fakeTracefs builds a tracefs tree in a temporary directory with the
// given tracepoints ("sys:name" → id) and the files beside them that the
// real one has, and returns its root.
func fakeTracefs(t *testing.T, ids map[string]uint64) string {
	t.Helper()
	root := t.TempDir()
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	events := filepath.Join(root, "events")
	write(filepath.Join(events, "enable"), "0\n")
	write(filepath.Join(events, "header_page"), "\tfield: u64 timestamp;\n")
	for tp, id := range ids {
		sys, name, _ := strings.Cut(tp, ":")
		write(filepath.Join(events, sys, "enable"), "0\n")
		write(filepath.Join(events, sys, "filter"), "none\n")
		write(filepath.Join(events, sys, name, "id"), strconv.FormatUint(id, 10)+"\n")
		write(filepath.Join(events, sys, name, "format"), "name: "+name+"\n")
	}
	return root
}

var fakeIDs = map[string]uint64{
	"sched:sched_switch":         372,
	"sched:sched_wakeup":         376,
	"sched:sched_process_exec":   384,
	"block:block_rq_complete":    1234,
	"block:block_rq_issue":       1236,
	"syscalls:sys_enter_openat":  700,
	"raw_syscalls:sys_enter":     20,
	"irq:irq_handler_entry":      150,
	"timer:hrtimer_expire_entry": 90,
}

// fakePMU makes a sysfs PMU events directory advertising names.
func fakePMU(t *testing.T, names ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "events")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("event=0x3c\n"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestParseEventSymbolic(t *testing.T) {
	hw := func(name string, config uint64) Event {
		return Event{Name: name, Type: unix.PERF_TYPE_HARDWARE, Config: config, Unit: "count", SampleType: name}
	}
	sw := func(name string, config uint64) Event {
		return Event{Name: name, Type: unix.PERF_TYPE_SOFTWARE, Config: config, Unit: "count", SampleType: name}
	}
	clock := func(name string, config uint64) Event {
		return Event{Name: name, Type: unix.PERF_TYPE_SOFTWARE, Config: config, Unit: "nanoseconds", SampleType: "cpu"}
	}
	want := map[string]Event{
		"cycles":                  EventCycles,
		"cpu-cycles":              EventCycles,
		"instructions":            hw("instructions", unix.PERF_COUNT_HW_INSTRUCTIONS),
		"cache-references":        hw("cache-references", unix.PERF_COUNT_HW_CACHE_REFERENCES),
		"cache-misses":            hw("cache-misses", unix.PERF_COUNT_HW_CACHE_MISSES),
		"branch-instructions":     hw("branch-instructions", unix.PERF_COUNT_HW_BRANCH_INSTRUCTIONS),
		"branches":                hw("branch-instructions", unix.PERF_COUNT_HW_BRANCH_INSTRUCTIONS),
		"branch-misses":           hw("branch-misses", unix.PERF_COUNT_HW_BRANCH_MISSES),
		"bus-cycles":              hw("bus-cycles", unix.PERF_COUNT_HW_BUS_CYCLES),
		"ref-cycles":              hw("ref-cycles", unix.PERF_COUNT_HW_REF_CPU_CYCLES),
		"stalled-cycles-frontend": hw("stalled-cycles-frontend", unix.PERF_COUNT_HW_STALLED_CYCLES_FRONTEND),
		"idle-cycles-frontend":    hw("stalled-cycles-frontend", unix.PERF_COUNT_HW_STALLED_CYCLES_FRONTEND),
		"stalled-cycles-backend":  hw("stalled-cycles-backend", unix.PERF_COUNT_HW_STALLED_CYCLES_BACKEND),
		"idle-cycles-backend":     hw("stalled-cycles-backend", unix.PERF_COUNT_HW_STALLED_CYCLES_BACKEND),
		"cpu-clock":               EventCPUClock,
		"task-clock":              clock("task-clock", unix.PERF_COUNT_SW_TASK_CLOCK),
		"page-faults":             sw("page-faults", unix.PERF_COUNT_SW_PAGE_FAULTS),
		"faults":                  sw("page-faults", unix.PERF_COUNT_SW_PAGE_FAULTS),
		"minor-faults":            sw("minor-faults", unix.PERF_COUNT_SW_PAGE_FAULTS_MIN),
		"major-faults":            sw("major-faults", unix.PERF_COUNT_SW_PAGE_FAULTS_MAJ),
		"context-switches":        sw("context-switches", unix.PERF_COUNT_SW_CONTEXT_SWITCHES),
		"cs":                      sw("context-switches", unix.PERF_COUNT_SW_CONTEXT_SWITCHES),
		"cpu-migrations":          sw("cpu-migrations", unix.PERF_COUNT_SW_CPU_MIGRATIONS),
		"migrations":              sw("cpu-migrations", unix.PERF_COUNT_SW_CPU_MIGRATIONS),
		"alignment-faults":        sw("alignment-faults", unix.PERF_COUNT_SW_ALIGNMENT_FAULTS),
		"emulation-faults":        sw("emulation-faults", unix.PERF_COUNT_SW_EMULATION_FAULTS),
	}
	// No tracefs at all: hardware and software names must not need it.
	src := eventSources{tracefs: []string{t.TempDir()}}
	for name, w := range want {
		got, err := src.parse(name)
		if err != nil || got != w {
			t.Errorf("parse(%q) = %+v, %v; want %+v", name, got, err, w)
		}
		if got.IsHardware() != (w.Type == unix.PERF_TYPE_HARDWARE) || got.IsTracepoint() {
			t.Errorf("%q: IsHardware %v, IsTracepoint %v", name, got.IsHardware(), got.IsTracepoint())
		}
	}
	// Every name in the table is covered above, so a new alias needs a test.
	for _, e := range symbolicEvents {
		for _, n := range e.names {
			if _, ok := want[n]; !ok {
				t.Errorf("event name %q is not tested", n)
			}
		}
	}
}

func TestParseEventTracepoint(t *testing.T) {
	src := eventSources{tracefs: []string{fakeTracefs(t, fakeIDs)}}
	for tp, id := range fakeIDs {
		got, err := src.parse(tp)
		want := Event{Name: tp, Type: unix.PERF_TYPE_TRACEPOINT, Config: id, Unit: "count", SampleType: "events"}
		if err != nil || got != want {
			t.Errorf("parse(%q) = %+v, %v; want %+v", tp, got, err, want)
		}
		if !got.IsTracepoint() || got.IsHardware() {
			t.Errorf("%q: IsTracepoint %v, IsHardware %v", tp, got.IsTracepoint(), got.IsHardware())
		}
	}
}

// TestParseEventTracefsFallback checks the second mount point is used when
// the first has no events/.
func TestParseEventTracefsFallback(t *testing.T) {
	src := eventSources{tracefs: []string{t.TempDir(), fakeTracefs(t, fakeIDs)}}
	got, err := src.parse("block:block_rq_complete")
	if err != nil || got.Config != 1234 {
		t.Fatalf("parse = %+v, %v; want id 1234", got, err)
	}
}

func TestParseEventUnknown(t *testing.T) {
	src := eventSources{tracefs: []string{fakeTracefs(t, fakeIDs)}}
	tests := []struct {
		name string
		want string // in the error text
	}{
		{"cyles", `unknown event "cyles"; did you mean cycles, cpu-cycles?`},
		{"Cycles", "did you mean cycles, cpu-cycles?"},
		{"pagefaults", "did you mean page-faults, faults?"},
		{"context-switch", "did you mean context-switches, cs?"},
		{"sched:sched_swich", `no tracepoint "sched_swich" in ` + "%s/events/sched; did you mean sched:sched_switch?"},
		{"sched:switch", "did you mean sched:sched_switch?"},
		{"shed:sched_switch", `no tracepoint subsystem "shed" in %s/events; did you mean sched:sched_switch?`},
		{"blok:block_rq_complet", "did you mean block:block_rq_complete?"},
		{"syscalls:sched_wakeup", "did you mean sched:sched_wakeup?"},
		{"cycles:u", "modifiers (:u, :k, :p) are not supported; did you mean cycles?"},
		{"cpu/cycles/", "pmu/event/ syntax is not supported"},
		{"sched:", "a tracepoint is subsystem:event"},
		{":sched_switch", "a tracepoint is subsystem:event"},
		{"a:b:c", "a tracepoint is subsystem:event"},
		{"..:id", "a tracepoint is subsystem:event"},
		{"sched:enable", `no tracepoint "enable"`}, // a file, not an event
		{"", "empty event name"},
	}
	root := src.tracefs[0]
	for _, tt := range tests {
		_, err := src.parse(tt.name)
		if !errors.Is(err, ErrUnknownEvent) {
			t.Errorf("parse(%q) error %v, want one wrapping ErrUnknownEvent", tt.name, err)
			continue
		}
		want := strings.ReplaceAll(tt.want, "%s", root)
		if !strings.Contains(err.Error(), want) {
			t.Errorf("parse(%q) error\n\t%v\nwant it to contain\n\t%s", tt.name, err, want)
		}
	}

	// Far from everything: no suggestion.
	for _, name := range []string{"nosuch:thing", "xyzzy"} {
		_, err := src.parse(name)
		if !errors.Is(err, ErrUnknownEvent) || strings.Contains(err.Error(), "did you mean") {
			t.Errorf("parse(%q) error %v, want ErrUnknownEvent without suggestions", name, err)
		}
	}
	_, err := src.parse("nosuch:thing")
	if want := `no tracepoint subsystem "nosuch"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("parse(nosuch:thing) error %v, want it to contain %s", err, want)
	}
}

func TestParseEventNoTracefs(t *testing.T) {
	src := eventSources{tracefs: []string{t.TempDir(), filepath.Join(t.TempDir(), "absent")}}
	_, err := src.parse("sched:sched_switch")
	if !errors.Is(err, ErrNoTracefs) || errors.Is(err, ErrUnknownEvent) {
		t.Fatalf("error %v, want one wrapping ErrNoTracefs", err)
	}
	if !strings.Contains(err.Error(), "mount -t tracefs nodev /sys/kernel/tracing") {
		t.Errorf("error %q does not say how to mount tracefs", err)
	}
}

// TestParseEventMountsTracefs: with no tracefs at either place, the
// event sources mount it at the first and read the id there; when the
// mount fails, the error wraps ErrNoTracefs and says why.
func TestParseEventMountsTracefs(t *testing.T) {
	tree := fakeTracefs(t, fakeIDs)
	root := filepath.Join(t.TempDir(), "tracing")
	var mounted []string
	src := eventSources{tracefs: []string{root, filepath.Join(t.TempDir(), "absent")},
		mount: func(dir string) error {
			mounted = append(mounted, dir)
			return os.Symlink(tree, dir) // stands for the mount
		}}
	got, err := src.parse("sched:sched_switch")
	if err != nil || got.Config != 372 {
		t.Fatalf("parse = %+v, %v; want id 372", got, err)
	}
	if _, err := src.parse("sched:sched_wakeup"); err != nil || len(mounted) != 1 || mounted[0] != root {
		t.Errorf("mounted %v (second parse: %v), want %s once", mounted, err, root)
	}

	src = eventSources{tracefs: []string{filepath.Join(t.TempDir(), "absent")},
		mount: func(dir string) error { return fmt.Errorf("mount -t tracefs nodev %s: %w", dir, unix.EPERM) }}
	_, err = src.parse("sched:sched_switch")
	if !errors.Is(err, ErrNoTracefs) || !strings.Contains(err.Error(), "could not mount it: mount -t tracefs") ||
		!strings.Contains(err.Error(), "operation not permitted") {
		t.Errorf("error %v, want one wrapping ErrNoTracefs that says why it could not be mounted", err)
	}
}

func TestParseEventBadID(t *testing.T) {
	root := fakeTracefs(t, fakeIDs)
	id := filepath.Join(root, "events", "sched", "sched_switch", "id")
	if err := os.WriteFile(id, []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := eventSources{tracefs: []string{root}}.parse("sched:sched_switch")
	if err == nil || errors.Is(err, ErrUnknownEvent) || !strings.Contains(err.Error(), "bad id") {
		t.Fatalf("error %v, want a bad id error", err)
	}
}

// TestParseEventTracefsDenied needs a non-root user, since root reads
// anything: as root it runs itself again as nobody (setpriv), as CI does.
func TestParseEventTracefsDenied(t *testing.T) {
	if os.Geteuid() == 0 {
		testutil.RunAsNobody(t, "^TestParseEventTracefsDenied$")
		return
	}
	root := fakeTracefs(t, fakeIDs)
	if err := os.Chmod(root, 0o700&^0o100); err != nil { // no search permission
		t.Fatal(err)
	}
	defer os.Chmod(root, 0o700)
	_, err := eventSources{tracefs: []string{root}}.parse("sched:sched_switch")
	if !errors.Is(err, fs.ErrPermission) || errors.Is(err, ErrNoTracefs) {
		t.Fatalf("error %v, want a permission error", err)
	}
}

const wantFakeList = `Hardware events
  cycles OR cpu-cycles               CPU cycles
  instructions                       instructions retired
  branch-instructions OR branches    branch instructions retired
  ref-cycles                         reference cycles, unaffected by frequency scaling

Software events
  cpu-clock                          per-CPU timer, in ns; works without a hardware PMU
  task-clock                         timer running while a task runs, in ns
  page-faults OR faults              page faults, minor and major
  minor-faults                       page faults served without I/O
  major-faults                       page faults that waited for I/O
  context-switches OR cs             context switches
  cpu-migrations OR migrations       moves of a task to another CPU
  alignment-faults                   unaligned accesses the kernel fixed up (not on x86)
  emulation-faults                   instructions the kernel emulated

Tracepoints
  block:block_rq_complete
  block:block_rq_issue
  irq:irq_handler_entry
  raw_syscalls:sys_enter
  sched:sched_process_exec
  sched:sched_switch
  sched:sched_wakeup
  syscalls:sys_enter_openat
  timer:hrtimer_expire_entry
`

func TestListEvents(t *testing.T) {
	src := eventSources{
		tracefs: []string{fakeTracefs(t, fakeIDs)},
		// What an Intel core advertises, with names gprofile has no use for.
		pmuEvents: []string{fakePMU(t, "cpu-cycles", "instructions", "branch-instructions", "ref-cycles", "mem-loads", "topdown-retiring")},
	}
	var b strings.Builder
	if err := src.list(&b); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != wantFakeList {
		t.Errorf("list output:\n%s\nwant:\n%s", got, wantFakeList)
	}
}

func TestListEventsNoPMUNoTracefs(t *testing.T) {
	src := eventSources{
		tracefs:   []string{t.TempDir()},
		pmuEvents: []string{filepath.Join(t.TempDir(), "cpu", "events")},
	}
	var b strings.Builder
	if err := src.list(&b); err != nil {
		t.Fatal(err)
	}
	hw, rest, _ := strings.Cut(b.String(), "\nSoftware events\n")
	sw, tp, _ := strings.Cut(rest, "\nTracepoints\n")
	if !strings.HasPrefix(hw, "Hardware events\n  no hardware PMU found") || !strings.Contains(hw, "cpu-clock works") {
		t.Errorf("hardware section without a PMU:\n%s", hw)
	}
	if !strings.HasPrefix(sw, "  cpu-clock ") || strings.Count(sw, "\n") != 9 {
		t.Errorf("software section:\n%s", sw)
	}
	if !strings.HasPrefix(tp, "  cannot list tracepoints: tracefs is not mounted") ||
		!strings.Contains(tp, "mount -t tracefs nodev /sys/kernel/tracing") {
		t.Errorf("tracepoint section without tracefs:\n%s", tp)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestListEventsWriteError(t *testing.T) {
	src := eventSources{tracefs: []string{fakeTracefs(t, fakeIDs)}, pmuEvents: []string{t.TempDir()}}
	if err := src.list(failWriter{}); err == nil || err.Error() != "disk full" {
		t.Errorf("list to a failing writer: %v", err)
	}
}

func TestEventEditDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		d    int
	}{
		{"", "", 0}, {"", "abc", 3}, {"abc", "", 3}, {"cycles", "cycles", 0},
		{"cyles", "cycles", 1}, {"sched_swich", "sched_switch", 1}, {"shed", "sched", 1},
		{"kitten", "sitting", 3}, {"flaw", "lawn", 2},
	} {
		if d := editDistance(tt.a, tt.b); d != tt.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, d, tt.d)
		}
	}
}

// TestParseEventLive parses a tracepoint every kernel has from the real
// tracefs, and lists the real events.
//
// It runs where tracefs is not mounted (a private mount namespace): the
// event sources mount it, as -e and -l need on such machines.
func TestParseEventLive(t *testing.T) {
	if !testutil.WithoutTracefs(t) {
		return
	}
	events, err := TracefsEvents()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(events, "sched", "sched_switch", "id"))
	if err != nil {
		t.Fatal(err)
	}
	id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := ParseEvent("sched:sched_switch")
	if err != nil || !ev.IsTracepoint() || ev.Config != id || ev.Name != "sched:sched_switch" {
		t.Fatalf("ParseEvent(sched:sched_switch) = %+v, %v; want tracepoint id %d", ev, err, id)
	}
	if _, err := ParseEvent("sched:sched_swich"); !errors.Is(err, ErrUnknownEvent) ||
		!strings.Contains(err.Error(), "did you mean sched:sched_switch") {
		t.Errorf("ParseEvent(sched:sched_swich) error %v", err)
	}

	var out strings.Builder
	if err := ListEvents(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Hardware events\n", "\nSoftware events\n  cpu-clock ", "\nTracepoints\n", "\n  sched:sched_switch\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("ListEvents output lacks %q", want)
		}
	}
	t.Logf("%d lines listed", strings.Count(out.String(), "\n"))
}
