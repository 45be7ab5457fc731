package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/counter"
)

// `gprofile stat -- CMD` counts from the exec of the re-executed child
// (childEnv) on its one thread, the child's pid: the exec must happen on
// the main thread, which a LockOSThread in init guarantees for main.
func init() {
	if os.Getenv(childEnv) == "1" {
		runtime.LockOSThread()
	}
}

const statUsage = `gprofile stat: count events of a command, a process or the whole system, as perf stat.

Usage:
  gprofile stat [-e EVENTS] [-r N] [-x SEP | --json] [-o FILE] [-v] -- CMD ARGS...
  gprofile stat [-e EVENTS] -p PID     until Ctrl-C or the process exits
  gprofile stat [-e EVENTS] -a [-- CMD] every CPU, until Ctrl-C or CMD exits

Examples:
  sudo gprofile stat -- make -j2
  sudo gprofile stat -e page-faults,sched:sched_switch -r 5 -- ./app
  sudo gprofile stat -e '{task-clock,context-switches}' -x, -- ./app
  sudo gprofile stat -e uprobe:./app:parse,usdt:./app:app:request -- ./app
  sudo gprofile stat -a -- sleep 5

Flags:
`

// statOptions are stat's parsed command line.
type statOptions struct {
	events  []string
	runs    int
	sep     string
	json    bool
	output  string
	verbose bool
	pid     int
	all     bool
	command []string
}

// splitShortFlags turns perf's glued short flags (-x, -r5) into two
// arguments, which package flag needs.
func splitShortFlags(args []string) []string {
	var out []string
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' && strings.ContainsRune("xreop", rune(a[1])) {
			out = append(out, a[:2], a[2:])
			continue
		}
		out = append(out, a)
	}
	return out
}

func parseStatFlags(args []string, stderr io.Writer) (*statOptions, error) {
	o := &statOptions{}
	fs := flag.NewFlagSet("gprofile stat", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Func("e", "count these `events` (comma-separated, {a,b} a group; see gprofile -l); default perf's set", func(s string) error {
		o.events = append(o.events, s)
		return nil
	})
	fs.IntVar(&o.runs, "r", 1, "run the command `N` times and print the means with their standard error")
	fs.StringVar(&o.sep, "x", "", "CSV output with this `separator`")
	fs.BoolVar(&o.json, "json", false, "JSON output, one object per event and line")
	fs.StringVar(&o.output, "o", "", "write the counts to `file` instead of stderr")
	fs.BoolVar(&o.verbose, "v", false, "print each perf_event_attr opened")
	fs.IntVar(&o.pid, "p", 0, "count process `pid` (every thread, and its new children)")
	fs.BoolVar(&o.all, "a", false, "count every online CPU")
	err := fs.Parse(splitShortFlags(args))
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stderr, statUsage)
		printFlags(stderr, fs)
		return nil, errHelp
	}
	if err != nil {
		return nil, err
	}
	o.command = fs.Args()
	switch {
	case o.runs < 1:
		return nil, fmt.Errorf("-r %d: the number of runs must be at least 1", o.runs)
	case o.sep != "" && o.json:
		return nil, errors.New("-x and --json exclude each other")
	case o.pid != 0 && o.all:
		return nil, errors.New("-p and -a exclude each other")
	case o.pid < 0:
		return nil, fmt.Errorf("-p %d: not a pid", o.pid)
	case o.pid == 0 && !o.all && len(o.command) == 0:
		return nil, errors.New("nothing to count: give -- CMD, -p PID or -a")
	case o.runs > 1 && len(o.command) == 0:
		return nil, errors.New("-r needs a command to repeat (-- CMD)")
	}
	return o, nil
}

// statMain runs `gprofile stat` and exits: with the command's status,
// 1 when counting failed, 2 for bad usage, 127 for a missing command.
func statMain(args []string) {
	o, err := parseStatFlags(args, os.Stderr)
	if errors.Is(err, errHelp) {
		os.Exit(0)
	}
	if err == nil {
		var code int
		code, err = runStat(o)
		if err == nil {
			os.Exit(code)
		}
	}
	var nf *errNotFound
	switch {
	case errors.As(err, &nf):
		fmt.Fprintf(os.Stderr, "gprofile stat: %v\n", err)
		os.Exit(127)
	case errors.As(err, new(usageError)), o == nil:
		fmt.Fprintf(os.Stderr, "gprofile stat: %v\nrun 'gprofile stat -h' for usage\n", err)
		os.Exit(2)
	}
	fmt.Fprintf(os.Stderr, "gprofile stat: %v\n", err)
	os.Exit(1)
}

// statSpecs parses -e (perf's default set without it; cpu-clock for
// task-clock with -a, as perf). A probe is counted through the kernel's
// probe PMUs with -a, else through a tracefs event made for the run
// (attach.ProbeEvent: children inherit its counter, not a PMU one's);
// the returned remove deletes those events, after the counters are
// closed.
func statSpecs(o *statOptions) (specs []counter.Spec, remove func(), err error) {
	list := strings.Join(o.events, ",")
	if list == "" {
		list = strings.Join(counter.DefaultEvents, ",")
		if o.all {
			list = strings.Replace(list, "task-clock", "cpu-clock", 1)
		}
	}
	var made []*attach.ProbeEvent
	remove = func() {
		for _, e := range made {
			if err := e.Close(); err != nil {
				fmt.Fprintf(os.Stderr, "gprofile stat: %v\n", err)
			}
		}
	}
	var openErr error // a probe event the kernel refused: not bad usage
	parse := func(name string) (attach.Event, error) {
		if !attach.IsProbeSpec(name) {
			return attach.ParseEvent(name)
		}
		p, err := attach.ParseProbe(name, nil)
		if err != nil {
			return attach.Event{}, err
		}
		if o.all {
			return attach.ProbeCountEvent(p)
		}
		var verbose io.Writer
		if o.verbose {
			verbose = os.Stderr
		}
		e, err := attach.OpenProbeEvent(p, verbose)
		if err != nil {
			if !errors.Is(err, attach.ErrBadProbe) {
				openErr = err
			}
			return attach.Event{}, err
		}
		made = append(made, e)
		return e.Event, nil
	}
	specs, err = counter.ParseList(list, parse)
	if err != nil {
		remove()
		if openErr != nil || errors.Is(err, attach.ErrNoKprobes) {
			return nil, nil, err
		}
		return nil, nil, badUsage(err)
	}
	return specs, remove, nil
}

// runStat counts, prints and returns the command's exit status.
func runStat(o *statOptions) (int, error) {
	specs, remove, err := statSpecs(o)
	if err != nil {
		return 0, err
	}
	defer remove()
	var out io.Writer = os.Stderr
	if o.output != "" {
		f, err := os.Create(o.output)
		if err != nil {
			return 0, fmt.Errorf("create -o file: %w", err)
		}
		defer f.Close()
		out = f
	}
	// Ctrl-C reaches the command (same terminal process group) and ends
	// it; gprofile stays to print, as perf stat does, and passes a signal
	// sent to gprofile alone on to the command (waitForwarding). With -p
	// or -a and no command it ends the count.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	res := &counter.Result{Target: statTarget(o)}
	for _, s := range specs {
		res.Names = append(res.Names, s.Name)
		res.Canon = append(res.Canon, s.Event.Name)
	}
	code := 0
	for r := 0; r < o.runs; r++ {
		var verbose io.Writer
		if o.verbose && r == 0 {
			verbose = os.Stderr
		}
		counts, secs, c, err := statOnce(o, specs, verbose, sigs, res)
		if err != nil {
			return 0, err
		}
		code = c
		res.Runs = append(res.Runs, counts)
		res.Elapsed = append(res.Elapsed, secs)
	}
	res.HaveRusage = res.HaveRusage && o.runs == 1
	var buf bytes.Buffer
	switch {
	case o.json:
		counter.WriteJSON(&buf, res)
	case o.sep != "":
		counter.WriteCSV(&buf, res, o.sep)
	default:
		counter.WriteText(&buf, res)
	}
	if _, err := out.Write(buf.Bytes()); err != nil {
		return 0, fmt.Errorf("write counts: %w", err)
	}
	return code, nil
}

func statTarget(o *statOptions) string {
	switch {
	case o.all:
		return "'system wide'"
	case o.pid != 0:
		return "process id '" + strconv.Itoa(o.pid) + "'"
	}
	return "'" + strings.Join(o.command, " ") + "'"
}

// statOnce does one run: opens the counters, runs the command or waits,
// reads. It returns the counts, the elapsed seconds and the exit status.
func statOnce(o *statOptions, specs []counter.Spec, verbose io.Writer, sigs <-chan os.Signal, res *counter.Result) ([]counter.Count, float64, int, error) {
	if o.pid == 0 && !o.all {
		return statCommand(o, specs, verbose, sigs, res)
	}
	t := counter.Target{PID: o.pid}
	if o.all {
		cpus, err := attach.OnlineCPUs()
		if err != nil {
			return nil, 0, 0, err
		}
		t = counter.Target{CPUs: cpus}
	}
	set, err := counter.Open(specs, t, verbose)
	if err != nil {
		return nil, 0, 0, err
	}
	defer set.Close()
	start := time.Now()
	if err := set.Enable(); err != nil {
		return nil, 0, 0, err
	}
	if verbose != nil {
		// What was opened above counts from here (a script may wait for it).
		fmt.Fprintln(verbose, "counters enabled")
	}
	code, err := statWait(o, sigs)
	if err != nil {
		return nil, 0, 0, err
	}
	set.Disable()
	secs := time.Since(start).Seconds()
	counts, err := set.Read()
	return counts, secs, code, err
}

// statCommand runs the command from gprofile's child gate with counters
// enabled by the kernel at its exec.
func statCommand(o *statOptions, specs []counter.Spec, verbose io.Writer, sigs <-chan os.Signal, res *counter.Result) ([]counter.Count, float64, int, error) {
	ch, err := startChild(o.command)
	if err != nil {
		return nil, 0, 0, err
	}
	set, err := counter.Open(specs, counter.Target{PID: ch.cmd.Process.Pid, Exec: true}, verbose)
	if err != nil {
		ch.kill()
		return nil, 0, 0, err
	}
	defer set.Close()
	waitGate(ch.cmd.Process.Pid)
	start := time.Now()
	if err := ch.start(); err != nil {
		ch.kill()
		return nil, 0, 0, fmt.Errorf("start %s: %w", o.command[0], err)
	}
	werr := waitForwarding(ch.cmd, sigs)
	secs := time.Since(start).Seconds()
	counts, err := set.Read()
	if ru, ok := ch.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		res.User = time.Duration(syscall.TimevalToNsec(ru.Utime)).Seconds()
		res.Sys = time.Duration(syscall.TimevalToNsec(ru.Stime)).Seconds()
		res.HaveRusage = true
	}
	return counts, secs, exitCode(werr), err
}

// waitGate waits, for at most a second, until the re-executed child has
// started its Go runtime and blocks reading the gate (read(2) of fd 3, as
// /proc/PID/syscall tells), so that the elapsed time starts at the
// release, as perf's does, and not at gprofile's own start-up.
func waitGate(pid int) {
	path := "/proc/" + strconv.Itoa(pid) + "/syscall"
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(50 * time.Microsecond) {
		b, err := os.ReadFile(path)
		if err != nil || strings.HasPrefix(string(b), "0 0x3 ") {
			return
		}
	}
}

// forwardDelay is how long a SIGINT or SIGTERM to gprofile waits before
// it is passed on to the command: a terminal's Ctrl-C reaches both, and
// the command should not get it twice.
const forwardDelay = 100 * time.Millisecond

// waitForwarding waits for cmd, passing on to it each SIGINT or SIGTERM
// gprofile gets that has not ended it within forwardDelay.
func waitForwarding(cmd *exec.Cmd, sigs <-chan os.Signal) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case err := <-done:
			return err
		case sig := <-sigs:
			select {
			case err := <-done:
				return err
			case <-time.After(forwardDelay):
				cmd.Process.Signal(sig)
			}
		}
	}
}

// statWait waits for the end of a -p or -a count: the command's exit,
// Ctrl-C, or (-p) the process's exit.
func statWait(o *statOptions, sigs <-chan os.Signal) (int, error) {
	if len(o.command) > 0 {
		cmd := exec.Command(o.command[0], o.command[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		if err := startCommand(cmd); err != nil {
			if errors.Is(err, exec.ErrNotFound) {
				return 0, &errNotFound{o.command[0]}
			}
			return 0, err
		}
		return exitCode(waitForwarding(cmd, sigs)), nil
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-sigs:
			return 0, nil
		case <-tick.C:
			if o.pid != 0 && !processAlive(o.pid) {
				return 0, nil
			}
		}
	}
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
