package attach

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Errors of ParseEvent and ListEvents a user can act on.
var (
	// ErrUnknownEvent: the name is neither a hardware or software event
	// perf knows by that name nor an existing tracepoint. The wrapping
	// error names the closest known events, if any.
	ErrUnknownEvent = errors.New("unknown event")
	// ErrNoTracefs: a tracepoint was asked for, but tracefs is mounted at
	// neither /sys/kernel/tracing nor /sys/kernel/debug/tracing.
	ErrNoTracefs = errors.New("tracefs is not mounted (mount it with: mount -t tracefs nodev /sys/kernel/tracing)")
)

// symbolicEvent is a hardware or software event perf knows by name.
type symbolicEvent struct {
	names  []string // canonical name first, then aliases, as `perf list` shows them
	typ    uint32   // PERF_TYPE_HARDWARE or PERF_TYPE_SOFTWARE
	config uint64   // PERF_COUNT_HW_* or PERF_COUNT_SW_*
	desc   string   // one line for ListEvents
}

var symbolicEvents = []symbolicEvent{
	{[]string{"cycles", "cpu-cycles"}, unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CPU_CYCLES, "CPU cycles"},
	{[]string{"instructions"}, unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_INSTRUCTIONS, "instructions retired"},
	{[]string{"cache-references"}, unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CACHE_REFERENCES, "cache accesses (usually the last-level cache)"},
	{[]string{"cache-misses"}, unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CACHE_MISSES, "cache misses (usually the last-level cache)"},
	{[]string{"branch-instructions", "branches"}, unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_BRANCH_INSTRUCTIONS, "branch instructions retired"},
	{[]string{"branch-misses"}, unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_BRANCH_MISSES, "mispredicted branches"},
	{[]string{"bus-cycles"}, unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_BUS_CYCLES, "bus cycles"},
	{[]string{"ref-cycles"}, unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_REF_CPU_CYCLES, "reference cycles, unaffected by frequency scaling"},
	{[]string{"stalled-cycles-frontend", "idle-cycles-frontend"}, unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_STALLED_CYCLES_FRONTEND, "cycles the front end (fetch, decode) stalled"},
	{[]string{"stalled-cycles-backend", "idle-cycles-backend"}, unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_STALLED_CYCLES_BACKEND, "cycles the back end (execution, memory) stalled"},

	{[]string{"cpu-clock"}, unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_CPU_CLOCK, "per-CPU timer, in ns; works without a hardware PMU"},
	{[]string{"task-clock"}, unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_TASK_CLOCK, "timer running while a task runs, in ns"},
	{[]string{"page-faults", "faults"}, unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_PAGE_FAULTS, "page faults, minor and major"},
	{[]string{"minor-faults"}, unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_PAGE_FAULTS_MIN, "page faults served without I/O"},
	{[]string{"major-faults"}, unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_PAGE_FAULTS_MAJ, "page faults that waited for I/O"},
	{[]string{"context-switches", "cs"}, unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_CONTEXT_SWITCHES, "context switches"},
	{[]string{"cpu-migrations", "migrations"}, unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_CPU_MIGRATIONS, "moves of a task to another CPU"},
	{[]string{"alignment-faults"}, unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_ALIGNMENT_FAULTS, "unaligned accesses the kernel fixed up (not on x86)"},
	{[]string{"emulation-faults"}, unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_EMULATION_FAULTS, "instructions the kernel emulated"},
}

// event returns e as an Event named by its canonical name.
func (e symbolicEvent) event() Event {
	ev := Event{Name: e.names[0], Type: e.typ, Config: e.config, Unit: "count", SampleType: e.names[0]}
	if e.typ == unix.PERF_TYPE_SOFTWARE &&
		(e.config == unix.PERF_COUNT_SW_CPU_CLOCK || e.config == unix.PERF_COUNT_SW_TASK_CLOCK) {
		ev.Unit, ev.SampleType = "nanoseconds", "cpu"
	}
	return ev
}

func lookupSymbolic(name string) (symbolicEvent, bool) {
	for _, e := range symbolicEvents {
		if slices.Contains(e.names, name) {
			return e, true
		}
	}
	return symbolicEvent{}, false
}

// eventSources says where the kernel describes its events; tests point it
// at fake trees.
type eventSources struct {
	tracefs   []string // tracefs mount points to try, in order; the first with events/ wins
	pmuEvents []string // sysfs directories of the core PMU's named events
	// mount, when not nil, mounts tracefs at tracefs[0] when no mount
	// point has events/.
	mount func(dir string) error
}

var hostEvents = eventSources{
	tracefs: []string{TracefsMountPoint, "/sys/kernel/debug/tracing"},
	mount:   mountTracefs,
	pmuEvents: []string{
		"/sys/bus/event_source/devices/cpu/events",
		// Intel hybrid CPUs have two core PMUs and no "cpu".
		"/sys/bus/event_source/devices/cpu_core/events",
		"/sys/bus/event_source/devices/cpu_atom/events",
	},
}

// ParseEvent returns the event perf knows by name:
//
//   - a hardware event: cycles (or cpu-cycles), instructions,
//     cache-references, cache-misses, branch-instructions (branches),
//     branch-misses, bus-cycles, ref-cycles, stalled-cycles-frontend
//     (idle-cycles-frontend), stalled-cycles-backend (idle-cycles-backend);
//   - a software event: cpu-clock, task-clock, page-faults (faults),
//     minor-faults, major-faults, context-switches (cs), cpu-migrations
//     (migrations), alignment-faults, emulation-faults;
//   - a tracepoint, subsystem:event (sched:sched_switch), whose id is read
//     from <tracefs>/events/<subsystem>/<event>/id, tracefs being
//     /sys/kernel/tracing or else /sys/kernel/debug/tracing.
//
// The Event is named by the canonical (first) name. Unit is "nanoseconds"
// for cpu-clock and task-clock and "count" for the rest; SampleType is
// "cpu" for those two clocks, "events" for tracepoints and the event name
// for the others. ParseEvent does not check that the machine has the PMU a
// hardware event needs; opening the event does (see Config.Event).
//
// Only tracepoints touch the file system. An unknown name, or a tracepoint
// tracefs does not have, returns an error wrapping ErrUnknownEvent that
// suggests the closest names. When tracefs is not mounted the error wraps
// ErrNoTracefs; when it may not be read (it is root-only by default), the
// error wraps fs.ErrPermission.
func ParseEvent(name string) (Event, error) { return hostEvents.parse(name) }

func (s eventSources) parse(name string) (Event, error) {
	if e, ok := lookupSymbolic(name); ok {
		return e.event(), nil
	}
	sys, ev, isTP := strings.Cut(name, ":")
	switch {
	case name == "":
		return Event{}, fmt.Errorf("%w: empty event name", ErrUnknownEvent)
	case !isTP && strings.Contains(name, "/"):
		return Event{}, unknownEvent(name, "pmu/event/ syntax is not supported", nil)
	case !isTP:
		if sugg := closest(name, symbolicNames(), 3); len(sugg) > 0 {
			return Event{}, unknownEvent(name, "", sugg)
		}
		return Event{}, unknownEvent(name, "no hardware or software event has this name, "+
			"and a tracepoint is subsystem:event", nil)
	}
	if e, ok := lookupSymbolic(sys); ok {
		return Event{}, unknownEvent(name, "event modifiers (:u, :k, :p) are not supported", []string{e.names[0]})
	}
	if !validTraceName(sys) || !validTraceName(ev) {
		return Event{}, unknownEvent(name, "a tracepoint is subsystem:event, e.g. sched:sched_switch", nil)
	}
	return s.tracepoint(sys, ev)
}

func symbolicNames() [][]string {
	groups := make([][]string, len(symbolicEvents))
	for i, e := range symbolicEvents {
		groups[i] = e.names
	}
	return groups
}

// validTraceName reports a name that can be one path element of tracefs.
func validTraceName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/:\x00")
}

// tracepoint reads the id of sys:ev from tracefs.
func (s eventSources) tracepoint(sys, ev string) (Event, error) {
	name := sys + ":" + ev
	events, err := s.eventsDir()
	if err != nil {
		return Event{}, fmt.Errorf("tracepoint %s: %w", name, err)
	}
	path := filepath.Join(events, sys, ev, "id")
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
		return Event{}, unknownTracepoint(events, sys, ev)
	}
	if err != nil {
		return Event{}, fmt.Errorf("read tracepoint id: %w", err)
	}
	id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return Event{}, fmt.Errorf("tracepoint %s: bad id in %s: %w", name, path, err)
	}
	return Event{Name: name, Type: unix.PERF_TYPE_TRACEPOINT, Config: id, Unit: "count", SampleType: "events"}, nil
}

// eventsDir returns the events directory of the first tracefs mount point
// that has one. When none has and s.mount is set, it mounts tracefs at
// the first mount point and returns its events directory; the error, when
// that fails too, says why.
func (s eventSources) eventsDir() (string, error) {
	var denied error
	for _, root := range s.tracefs {
		dir := filepath.Join(root, "events")
		fi, err := os.Stat(dir)
		if err == nil && fi.IsDir() {
			return dir, nil
		}
		if errors.Is(err, fs.ErrPermission) && denied == nil {
			denied = err
		}
	}
	if denied != nil {
		return "", fmt.Errorf("read tracefs: %w (tracefs is readable by root only)", denied)
	}
	if s.mount == nil || len(s.tracefs) == 0 {
		return "", fmt.Errorf("%w; looked in %s", ErrNoTracefs, strings.Join(s.tracefs, " and "))
	}
	err := s.mount(s.tracefs[0])
	if err == nil {
		dir := filepath.Join(s.tracefs[0], "events")
		if fi, serr := os.Stat(dir); serr == nil && fi.IsDir() {
			return dir, nil
		}
		err = fmt.Errorf("mounted tracefs at %s, but it has no events directory", s.tracefs[0])
	}
	return "", fmt.Errorf("%w; looked in %s, and could not mount it: %v", ErrNoTracefs, strings.Join(s.tracefs, " and "), err)
}

// unknownTracepoint explains why sys:ev is not in events: a missing
// subsystem, or a missing event in it, with the closest tracepoints.
func unknownTracepoint(events, sys, ev string) error {
	name := sys + ":" + ev
	subs, _ := subdirs(events)
	if evs, err := subdirs(filepath.Join(events, sys)); err == nil {
		why := fmt.Sprintf("no tracepoint %q in %s", ev, filepath.Join(events, sys))
		sugg := prefixed(sys, closest(ev, singletons(evs), 3))
		return unknownEvent(name, why, sameEventIn(events, subs, ev, sugg))
	}
	var sugg []string
	for _, sub := range closest(sys, singletons(subs), 3) {
		evs, _ := subdirs(filepath.Join(events, sub))
		sugg = append(sugg, prefixed(sub, closest(ev, singletons(evs), 1))...)
	}
	why := fmt.Sprintf("no tracepoint subsystem %q in %s", sys, events)
	return unknownEvent(name, why, sameEventIn(events, subs, ev, sugg))
}

// sameEventIn appends to sugg sub:ev for each subsystem in subs that has
// a tracepoint ev, and returns it.
func sameEventIn(events string, subs []string, ev string, sugg []string) []string {
	for _, sub := range subs {
		tp := sub + ":" + ev
		if _, err := os.Stat(filepath.Join(events, sub, ev, "id")); err == nil && !slices.Contains(sugg, tp) {
			sugg = append(sugg, tp)
		}
	}
	return sugg
}

// unknownEvent returns an error wrapping ErrUnknownEvent:
// `unknown event "name": why; did you mean a, b?`.
func unknownEvent(name, why string, suggestions []string) error {
	var b strings.Builder
	if why != "" {
		b.WriteString(": " + why)
	}
	if len(suggestions) > 0 {
		b.WriteString("; did you mean " + strings.Join(suggestions, ", ") + "?")
	}
	return fmt.Errorf("%w %q%s", ErrUnknownEvent, name, b.String())
}

// subdirs returns the names of the directories in dir, sorted.
func subdirs(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

func singletons(names []string) [][]string {
	groups := make([][]string, len(names))
	for i, n := range names {
		groups[i] = []string{n}
	}
	return groups
}

func prefixed(prefix string, names []string) []string {
	for i, n := range names {
		names[i] = prefix + ":" + n
	}
	return names
}

// closest returns the names of up to limit groups that are close to name
// (a group is one event's names: canonical first, then aliases), closest
// first, case ignored. A group is close when one of its names is within an
// edit distance of about a quarter of name's length; failing any such,
// when one contains name (of 3 or more bytes).
func closest(name string, groups [][]string, limit int) []string {
	name = strings.ToLower(name)
	maxDist := 1 + len(name)/4
	type match struct {
		dist  int
		names []string
	}
	var near, containing []match
	for _, g := range groups {
		best, contains := maxDist+1, false
		for _, n := range g {
			n = strings.ToLower(n)
			best = min(best, editDistance(name, n))
			contains = contains || len(name) >= 3 && strings.Contains(n, name)
		}
		switch {
		case best <= maxDist:
			near = append(near, match{best, g})
		case contains:
			containing = append(containing, match{len(g[0]), g})
		}
	}
	if len(near) == 0 {
		near = containing
	}
	slices.SortStableFunc(near, func(a, b match) int { return a.dist - b.dist })
	var out []string
	for i := 0; i < len(near) && i < limit; i++ {
		out = append(out, near[i].names...)
	}
	return out
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// ListEvents writes the events ParseEvent accepts, the way `perf list`
// does, in three sections:
//
//   - "Hardware events": those the core PMU advertises in
//     /sys/bus/event_source/devices/cpu/events (cpu_core and cpu_atom on
//     hybrid Intel CPUs), or a line saying no hardware PMU was found;
//   - "Software events": all of them;
//   - "Tracepoints": subsystem:event for every <tracefs>/events/*/*,
//     sorted, or a line saying why tracefs could not be read.
//
// Each hardware and software event has its aliases and a one-line
// description. What the machine lacks is reported in the listing, not as
// an error: the error is only that of writing to w.
func ListEvents(w io.Writer) error { return hostEvents.list(w) }

func (s eventSources) list(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "Hardware events")
	s.listHardware(bw)
	fmt.Fprintln(bw, "\nSoftware events")
	for _, e := range symbolicEvents {
		if e.typ == unix.PERF_TYPE_SOFTWARE {
			writeSymbolic(bw, e)
		}
	}
	fmt.Fprintln(bw, "\nTracepoints")
	tps, err := s.tracepoints()
	if err != nil {
		fmt.Fprintf(bw, "  cannot list tracepoints: %v\n", err)
	}
	for _, tp := range tps {
		fmt.Fprintf(bw, "  %s\n", tp)
	}
	return bw.Flush()
}

func (s eventSources) listHardware(w io.Writer) {
	advertised, found := map[string]bool{}, false
	for _, dir := range s.pmuEvents {
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		found = true
		for _, e := range ents {
			advertised[e.Name()] = true
		}
	}
	if !found {
		fmt.Fprintf(w, "  no hardware PMU found (no %s; a VM?): use software events, cpu-clock works everywhere\n",
			s.pmuEvents[0])
		return
	}
	n := 0
	for _, e := range symbolicEvents {
		if e.typ == unix.PERF_TYPE_HARDWARE && slices.ContainsFunc(e.names, func(n string) bool { return advertised[n] }) {
			writeSymbolic(w, e)
			n++
		}
	}
	if n == 0 {
		fmt.Fprintln(w, "  the CPU's PMU advertises none of the generic hardware events: use cpu-clock")
	}
}

func writeSymbolic(w io.Writer, e symbolicEvent) {
	fmt.Fprintf(w, "  %-34s %s\n", strings.Join(e.names, " OR "), e.desc)
}

// tracepoints returns subsystem:event for every tracepoint, sorted.
func (s eventSources) tracepoints() ([]string, error) {
	events, err := s.eventsDir()
	if err != nil {
		return nil, err
	}
	subs, err := subdirs(events)
	if err != nil {
		return nil, fmt.Errorf("read tracefs: %w", err)
	}
	var tps []string
	for _, sub := range subs {
		evs, err := subdirs(filepath.Join(events, sub))
		if err != nil {
			return nil, fmt.Errorf("read tracefs: %w", err)
		}
		tps = append(tps, prefixed(sub, evs)...)
	}
	slices.Sort(tps)
	return tps, nil
}
