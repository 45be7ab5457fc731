package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/output"
)

// options are the parsed command line.
type options struct {
	freqHz     uint64
	duration   time.Duration // 0: until Ctrl-C
	pids       []uint32
	tids       []uint32
	cpus       string   // -C list, "" for every online CPU
	event      string   // -e name, "" for cycles falling back to cpu-clock
	probes     []string // -e kprobe:..., uprobe:..., usdt:..., perf probe events
	force      bool     // --force: attach probes whatever their hits cost
	listProbes string   // -l PROBE-PATTERN: list what a probe pattern matches
	period     uint64   // -c, 0 for frequency mode
	cgroup     string
	list       bool
	command    []string // after --: the command to start and profile
	output     string   // "-" is stdout
	folded     bool
	swEvent    bool
	idle       bool
	verbose    bool
	ringSize   int      // --ring-size bytes, 0 for automatic
	format     string   // one of formats, from --format, -E or -o
	labels     []string // pprof labels (--labels)
	quiet      bool
	perPID     bool          // folded: comm-PID
	perTID     bool          // folded: comm-PID/TID
	fullName   bool          // folded: keep C++ parameter lists
	self       bool          // sample gprofile itself too
	cacheDir   string        // --cache-dir: inflated DWARF sections and line memos by build ID, "" for none
	writeEmpty bool          // --write-empty: write a profile of 0 samples over the previous one
	callGraph  callGraphFlag // --call-graph fp|dwarf[,SIZE]
	freqSet    bool          // -f given explicitly
	offCPU     offCPUFlags   // --off-cpu and companions
	args       []string      // the command line, for the profile's comments
	cont       contOptions   // --push, --switch-output and their flags
}

var (
	errHelp    = errors.New("help requested")
	errVersion = errors.New("version printed")
)

// usageError is a bad command line found after parsing (an event, CPU,
// pid or frequency the machine does not have): main exits 2 for it, as
// for a bad flag.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// badUsage marks err (when not nil) as a usage error.
func badUsage(err error) error {
	if err == nil {
		return nil
	}
	return usageError{err}
}

const usageText = `gprofile: sample CPU stacks of the whole system or of some processes with eBPF.

Usage:
  gprofile [flags]                 whole system (or -p, -t, --cgroup)
  gprofile [flags] -- CMD ARGS...  start CMD and profile it and its children
  gprofile view FILE [--http ADDR] pprof's web UI for a profile
  gprofile check [-p PID]          what this machine (and PID's binaries) lack for a complete profile
  gprofile stat [-e EVENTS] -- CMD count events as perf stat (gprofile stat -h)

Examples:
  sudo gprofile -f 99 -d 10              whole system for 10 s, writes gprofile.pb.gz
  sudo gprofile -p 1234 -E > folded.txt  process 1234 (and its children), folded stacks
  sudo gprofile -p 1234,5678 -d 30s -o app.pb.gz
  sudo gprofile -d 10 -o flame.html      interactive flame graph, opens offline in a browser
  sudo gprofile -p 1234 --format text    every sample as it comes (--format json: JSON Lines)
  gprofile view gprofile.pb.gz           pprof's web UI (flame graph, top, source) on localhost:8080
  go tool pprof -top gprofile.pb.gz      top functions
  go tool pprof -http=:8080 gprofile.pb.gz   flame graph in the browser
  flamegraph.pl folded.txt > flame.svg   flame graph from folded stacks
  sudo gprofile -E -o make.folded -- make -j2   a command and everything it forks
  sudo gprofile -t 4321 -d 5             one thread
  sudo gprofile --cgroup system.slice/nginx.service -d 10
  sudo gprofile -e sched:sched_switch -d 5 -E   where tasks block (every switch)
  sudo gprofile -e page-faults -c 1 -- ./app    every page fault of ./app
  sudo gprofile --off-cpu -p 1234 -d 10  on-CPU and off-CPU (blocked) time; pprof -sample_index=wall
  gprofile -l                            list the events this machine has

Flags:
`

func parseFlags(argv []string, stderr io.Writer) (*options, error) {
	o := &options{args: append([]string{"gprofile"}, argv...)}
	fs := flag.NewFlagSet("gprofile", flag.ContinueOnError)
	// A bad flag is one line (main adds the pointer to -h); only -h
	// prints the help.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.Uint64Var(&o.freqHz, "f", 99, "sampling `frequency` in Hz on each CPU")
	fs.Uint64Var(&o.freqHz, "F", 99, "same as -f (perf's spelling)")
	fs.Var((*durationFlag)(&o.duration), "d", "profile for this `duration` (10, 10s, 1m30s); default: until Ctrl-C")
	fs.Var(&idsFlag{&o.pids, "pid"}, "p", "profile only these `pids` (comma-separated) and the processes they fork")
	fs.Var(&idsFlag{&o.tids, "tid"}, "t", "profile only these thread `tids` (comma-separated)")
	fs.StringVar(&o.cpus, "C", "", "sample only on these `cpus` (0,2-3); default every online CPU")
	fs.Var(&eventsFlag{o}, "e", "sample on this `event` (cpu-clock, cycles, page-faults, sched:sched_switch; see -l), or on every hit of probes (kprobe:SYM, uprobe:PATH:SYM, usdt:PATH:PROVIDER:NAME; repeat -e for several; gprofile -l shows the syntax)")
	fs.BoolVar(&o.force, "force", false, "attach probes even when counting their hits first says sampling them would cost more than a few percent of a CPU")
	fs.Uint64Var(&o.period, "c", 0, "sample every `count` events instead of at -f Hz (tracepoints: default 1, every hit)")
	fs.StringVar(&o.cgroup, "cgroup", "", "profile only tasks in this cgroup v2 `path` or below (system.slice/x.service)")
	fs.IntVar(&o.ringSize, "ring-size", 0, "BPF ring buffer size in `bytes` (a power of two, at least a page); default from -f and the CPUs")
	formatFlag := fs.String("format", "", "output `format`: pprof, folded, text (per sample), json (JSON Lines), html (flame graph); default from -o's extension")
	labelsFlag := fs.String("labels", "pid,comm", "pprof sample `labels`: a comma-separated subset of pid, tid, comm, cpu, cgroup (more labels, more samples)")
	cgroupLabels := fs.Bool("cgroup-labels", false, "add the cgroup label (the task's cgroup v2 path) to every sample")
	fs.BoolVar(&o.perPID, "per-pid", false, "folded: write the first frame as comm-PID")
	fs.BoolVar(&o.perTID, "per-thread", false, "folded: write the first frame as comm-PID/TID")
	fs.BoolVar(&o.fullName, "full-names", false, "folded: keep C++ parameter lists in function names")
	fs.BoolVar(&o.quiet, "q", false, "quiet: no status line, top table or summary on stderr")
	fs.BoolVar(&o.list, "l", false, "list the events available on this machine and exit")
	fs.StringVar(&o.output, "o", "", "write the profile to `file` (- for stdout); default gprofile.pb.gz, or stdout with -E (with -- CMD: gprofile.folded)")
	fs.BoolVar(&o.folded, "E", false, "write folded stacks (comm;root;...;leaf count) instead of pprof")
	fs.BoolVar(&o.swEvent, "sw-event", false, "sample the software cpu-clock event instead of hardware cycles")
	fs.BoolVar(&o.idle, "idle", false, "include samples of the idle task (pid 0)")
	fs.BoolVar(&o.self, "self", false, "include samples of gprofile itself (left out by default)")
	fs.BoolVar(&o.verbose, "v", false, "print each perf_event_attr opened and BPF load details")
	o.callGraph = callGraphFlag{mode: attach.CallGraphDWARF}
	fs.Var(&o.callGraph, "call-graph", "how user stacks are taken: `mode` dwarf[,SIZE] (registers and up to SIZE bytes of stack, unwound with .eh_frame: whole stacks without frame pointers; SIZE default 32768, at most 65536) or fp (frame pointers, walked in BPF)")
	fs.StringVar(&o.cacheDir, "cache-dir", defaultCacheDir(os.Getenv), "keep inflated debug sections and the source lines DWARF gave (by build ID), and kernel symbol names (by boot), in `dir` for the next run (at most 256 MiB; '' for none)")
	fs.BoolVar(&o.writeEmpty, "write-empty", false, "write the profile even when nothing was sampled (by default a run of 0 samples keeps the previous file)")
	o.offCPU.register(fs)
	allCPUs := fs.Bool("a", false, "accepted for perf's -a: every CPU is sampled unless -p, -t, --cgroup or -- CMD narrow it")
	graph := fs.Bool("g", false, "accepted for perf's -g: call stacks are always recorded (--call-graph says how)")
	o.cont.register(fs)
	version := fs.Bool("version", false, "print gprofile's version and exit")
	err := fs.Parse(argv)
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	o.freqSet = set["f"] || set["F"]
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stderr, usageText)
		printFlags(stderr, fs)
		return nil, errHelp
	case err != nil:
		return nil, err
	case *version:
		fmt.Fprintln(stderr, versionLine())
		return nil, errVersion
	}
	if *allCPUs && !o.quiet {
		fmt.Fprintln(stderr, "gprofile: -a is the default: every CPU is sampled unless -p, -t, --cgroup or -- CMD narrow it")
	}
	if *graph && !o.quiet {
		fmt.Fprintln(stderr, "gprofile: -g is the default: call stacks are always recorded (--call-graph fp|dwarf says how)")
	}
	if set["c"] && o.period == 0 {
		return nil, errors.New("-c 0: the count must be at least 1 (sample every N events)")
	}
	if set["ring-size"] && (o.ringSize < os.Getpagesize() || o.ringSize&(o.ringSize-1) != 0) {
		return nil, fmt.Errorf("--ring-size %d: want a power of two of at least %d bytes (the page size)", o.ringSize, os.Getpagesize())
	}
	if o.list && o.event != "" {
		return nil, fmt.Errorf("-l with -e %s: -l takes a probe pattern (-l 'kprobe:vfs_*') or nothing", o.event)
	}
	if o.list && len(o.probes) == 1 && fs.NArg() == 0 {
		o.listProbes = o.probes[0]
		return o, nil
	}
	if o.list && fs.NArg() == 1 && !slices.Contains(argv, "--") {
		o.listProbes = fs.Arg(0)
		return o, nil
	}
	if fs.NArg() > 0 {
		if !slices.Contains(argv, "--") {
			return nil, fmt.Errorf("unexpected argument %q (to profile a command, put it after --)", fs.Arg(0))
		}
		o.command = fs.Args()
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	if err := o.checkContinuous(set); err != nil {
		return nil, err
	}
	if err := o.offCPU.check(o, set); err != nil {
		return nil, err
	}
	if err := o.pickOutput(*formatFlag, set["o"]); err != nil {
		return nil, err
	}
	if err := o.checkContinuousOutput(set); err != nil {
		return nil, err
	}
	o.folded = o.format == formatFolded
	if o.labels, err = parseLabels(*labelsFlag); err != nil {
		return nil, err
	}
	if *cgroupLabels && !slices.Contains(o.labels, output.LabelCgroup) {
		o.labels = append(o.labels, output.LabelCgroup)
	}
	return o, nil
}

// check rejects flag combinations that make no sense.
func (o *options) check() error {
	targets := 0
	for _, set := range []bool{o.pids != nil, o.tids != nil, o.command != nil} {
		if set {
			targets++
		}
	}
	if targets > 1 {
		return errors.New("choose one of -p, -t and -- CMD")
	}
	if o.period != 0 && o.freqSet {
		return errors.New("choose one of -f (frequency) and -c (period)")
	}
	return nil
}

// eventsFlag is -e: one event (the last wins, as before), or probes,
// which add up (each -e one probe); an event and probes do not mix.
type eventsFlag struct{ o *options }

func (e *eventsFlag) String() string {
	if e.o == nil {
		return ""
	}
	return strings.Join(append([]string{e.o.event}, e.o.probes...), ",")
}

func (e *eventsFlag) Set(s string) error {
	if attach.IsProbeSpec(s) || attach.IsTraceEventProbe(s) {
		if e.o.event != "" {
			return fmt.Errorf("-e %s with -e %s: sample on an event or on probes, not both", e.o.event, s)
		}
		e.o.probes = append(e.o.probes, s)
		return nil
	}
	if len(e.o.probes) > 0 {
		return fmt.Errorf("-e %s with -e %s: sample on an event or on probes, not both", s, e.o.probes[0])
	}
	e.o.event = s
	return nil
}

// durationFlag accepts Go durations ("10s") and plain seconds ("10", "2.5").
type durationFlag time.Duration

func (d *durationFlag) String() string { return time.Duration(*d).String() }

func (d *durationFlag) Set(s string) error {
	if secs, err := strconv.ParseFloat(s, 64); err == nil {
		*d = durationFlag(secs * float64(time.Second))
	} else if v, err := time.ParseDuration(s); err == nil {
		*d = durationFlag(v)
	} else {
		return fmt.Errorf("not a duration (use 10, 10s or 1m30s)")
	}
	if *d <= 0 {
		return fmt.Errorf("duration must be positive")
	}
	return nil
}

// callGraphFlag is --call-graph in perf's words: "fp", or "dwarf" with an
// optional window size in bytes ("dwarf,16384"); window 0 means the
// default (attach.DefaultStackWindow).
type callGraphFlag struct {
	mode   attach.CallGraph
	window int
}

func (c *callGraphFlag) String() string {
	if c.mode == attach.CallGraphDWARF && c.window != 0 {
		return fmt.Sprintf("%s,%d", c.mode, c.window)
	}
	return c.mode.String()
}

func (c *callGraphFlag) Set(s string) error {
	name, size, sized := strings.Cut(s, ",")
	mode, err := attach.ParseCallGraph(name)
	if err != nil {
		return err
	}
	window := 0
	if sized {
		if mode != attach.CallGraphDWARF {
			return fmt.Errorf("only dwarf takes a stack size (dwarf,SIZE)")
		}
		n, err := strconv.Atoi(size)
		if err != nil || n < 8 || n > attach.MaxStackWindow {
			return fmt.Errorf("stack size %q: want bytes from 8 to %d", size, attach.MaxStackWindow)
		}
		window = (n + 7) &^ 7
	}
	*c = callGraphFlag{mode: mode, window: window}
	return nil
}

// idsFlag accepts comma-separated process or thread ids (kind "pid" or
// "tid", for the errors) and may be repeated.
type idsFlag struct {
	ids  *[]uint32
	kind string
}

func (p *idsFlag) String() string {
	if p.ids == nil {
		return "[]"
	}
	return fmt.Sprint(*p.ids)
}

func (p *idsFlag) Set(s string) error {
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 32)
		if err != nil || v == 0 {
			return fmt.Errorf("bad %s %q", p.kind, f)
		}
		*p.ids = append(*p.ids, uint32(v))
	}
	return nil
}

// printFlags lists the flags, single-letter ones as -f and the others as
// --name, the way perf and most Unix tools spell them.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		dash := "-"
		if len(f.Name) > 1 {
			dash = "--"
		}
		left := dash + f.Name
		if name != "" {
			left += " " + name
		}
		def := ""
		if !slices.Contains([]string{"", "false", "0", "0s", "[]"}, f.DefValue) {
			def = " (default " + f.DefValue + ")"
		}
		fmt.Fprintf(w, "  %-22s %s%s\n", left, usage, def)
	})
}

// defaultCacheDir is where --cache-dir points unless given:
// $XDG_CACHE_HOME/gprofile, else $HOME/.cache/gprofile; "" (no cache)
// without either.
func defaultCacheDir(getenv func(string) string) string {
	if d := getenv("XDG_CACHE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "gprofile")
	}
	if h := getenv("HOME"); filepath.IsAbs(h) {
		return filepath.Join(h, ".cache", "gprofile")
	}
	return ""
}
