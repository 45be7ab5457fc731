package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/output"
	"github.com/gprofile/gprofile/internal/recorder"
	"github.com/gprofile/gprofile/internal/symbolize"
	"github.com/gprofile/gprofile/internal/symbolize/debuginfo/debuginfod"
	"github.com/gprofile/gprofile/internal/symbolize/ksym"
	"golang.org/x/sys/unix"
)

// run checks the input, samples until the duration ends, a signal
// arrives or the command exits, and writes the profile. Every check that
// can fail on bad input runs before sampling starts. It returns the exit
// status: the command's with -- CMD, else 0.
func run(o *options) (int, error) {
	if o.listProbes != "" {
		return 0, listProbes(os.Stdout, o.listProbes)
	}
	if o.list {
		if err := attach.ListEvents(os.Stdout); err != nil {
			return 1, err
		}
		return 0, writeProbeSyntax(os.Stdout)
	}
	if o.cont.on() {
		return runContinuous(o)
	}
	cfg, err := recorderConfig(o)
	if err != nil {
		return 1, err
	}
	limitProcs(&cfg.Sampling)
	if err := guardProbeCost(o, cfg.Sampling); err != nil {
		return 1, err
	}
	out, err := createOut(o.output)
	if err != nil {
		return 1, err
	}
	defer out.abort()
	defer out.watchReader()()
	var kid *child
	if o.command != nil {
		if kid, err = startChild(o.command); err != nil {
			return 1, err
		}
		defer kid.kill()
		cfg.Sampling.PIDs, cfg.Sampling.AtExec = []uint32{uint32(kid.cmd.Process.Pid)}, true
	}
	bw := bufio.NewWriterSize(out.writer(), 1<<16)
	cfg.Stream = newStreamer(o.format, bw)
	// New opens the kernel symbol lookup in the background (or, when it
	// cannot load, lists kallsyms: BenchmarkOpenLookup, BenchmarkKallsymsRead) and
	// starts sampling: -d counts from there, and the samples taken while
	// kernel symbols finish loading wait in the ring buffer (sized for a
	// quarter of a second of them).
	rec, err := recorder.New(cfg)
	if err != nil {
		return 1, err
	}
	defer rec.Close()
	ctx, stop := stopContext(o.duration, out, kid)
	defer stop()
	if !o.quiet {
		for _, note := range rec.Notes() { // waits for the kernel symbols
			fmt.Fprintf(os.Stderr, "gprofile: %s\n", note)
		}
	}
	if kid != nil {
		if err := kid.start(); err != nil {
			return 1, err
		}
	}
	if o.pids != nil {
		var targetsGone context.CancelFunc
		ctx, targetsGone = context.WithCancel(ctx)
		defer targetsGone()
		go stopWhenTargetsExit(ctx, rec, o.quiet, targetsGone)
	}
	if o.verbose { // tests wait for this line: signals are handled by now
		fmt.Fprintln(os.Stderr, "gprofile: sampling started")
	}
	offCPUNote(os.Stderr, o)
	st := startStatus(o, rec)
	res, err := rec.Run(ctx)
	st.stop()
	if err != nil {
		return 1, err
	}
	err = writeProfile(o, out, bw, &res)
	if err != nil && !errors.Is(err, errReaderGone) {
		return 1, err
	}
	if !o.quiet || res.Samples == 0 || err != nil {
		summarize(os.Stderr, o, out, &res)
	}
	if !o.quiet {
		for _, note := range res.SymbolNotes {
			fmt.Fprintf(os.Stderr, "gprofile: %s\n", note)
		}
	}
	if err != nil {
		return 141, nil // as a process killed by SIGPIPE, which scripts know
	}
	if kid != nil {
		return exitCode(kid.wait()), nil
	}
	return 0, nil
}

// recorderConfig turns the flags into the recorder's configuration.
func recorderConfig(o *options) (recorder.Config, error) {
	sc, err := sampleConfig(o)
	return recorder.Config{
		Sampling:      sc,
		Symbolize:     symbolize.Options{KernelLookup: openKernelLookup, KallsymsIter: ksym.LoadIter, CacheDir: o.cacheDir, Debuginfod: debuginfodConfig()},
		Labels:        o.labels,
		PerThread:     o.perTID,
		AfterSampling: writeDevHeapProfile,
	}, err
}

// debuginfodConfig reads the debuginfod client's configuration from
// elfutils' environment variables (DEBUGINFOD_URLS and the rest); unset,
// the symbolizer never touches the network.
func debuginfodConfig() debuginfod.Config {
	cfg, _ := debuginfod.ReadConfig(os.Getenv)
	return cfg
}

// openKernelLookup opens the BPF kernel symbol lookup for the symbolizer
// (a nil *ksym.Lookup must not become a non-nil interface).
func openKernelLookup() (symbolize.KernelLookup, error) {
	l, err := ksym.OpenLookup()
	if err != nil {
		return nil, err
	}
	return l, nil
}

// sampleConfig turns the flags into the sampler's configuration, checking
// everything that can be checked before anything is opened: privileges,
// the event, frequency or period, CPUs, pids, tids and the cgroup.
func sampleConfig(o *options) (attach.Config, error) {
	cfg := attach.Config{FrequencyHz: o.freqHz, SoftwareEvent: o.swEvent, IncludeIdle: o.idle, Period: o.period, RingBytes: o.ringSize, ReportExits: true, Log: os.Stderr,
		CallGraph: o.callGraph.mode, StackWindow: o.callGraph.window, StackTops: true}
	if !o.self {
		cfg.SkipPID = uint32(os.Getpid())
	}
	if cfg.OffCPU = o.offCPU.attachConfig(); cfg.OffCPU != nil {
		cfg.SoftwareEvent = true // on-CPU weights in ns, as off-CPU ones
	}
	if o.verbose {
		cfg.Verbose = os.Stderr
	}
	if o.quiet {
		cfg.Log = io.Discard
	}
	if err := attach.CheckPrivileges(); err != nil {
		return cfg, err
	}
	if len(o.probes) > 0 {
		pids, err := tgids(o.pids)
		if err != nil {
			return cfg, badUsage(fmt.Errorf("-p: %w", err))
		}
		for _, spec := range o.probes {
			p, err := attach.ParseProbe(spec, pids)
			if errors.Is(err, attach.ErrBadProbe) {
				err = badUsage(err)
			}
			if err != nil {
				return cfg, err
			}
			cfg.Probes = append(cfg.Probes, p)
		}
	}
	if o.event != "" {
		ev, err := attach.ParseEvent(o.event)
		if errors.Is(err, attach.ErrUnknownEvent) {
			err = badUsage(err)
		}
		if err != nil {
			return cfg, err
		}
		cfg.Event = &ev
	}
	if o.period == 0 && len(cfg.Probes) == 0 && (cfg.Event == nil || !cfg.Event.IsTracepoint()) {
		if err := attach.CheckFrequency(o.freqHz); err != nil {
			return cfg, badUsage(err)
		}
	}
	var err error
	if cfg.CPUs, err = selectCPUs(o.cpus); err != nil {
		return cfg, badUsage(err)
	}
	if cfg.PIDs, err = tgids(o.pids); err != nil {
		return cfg, badUsage(fmt.Errorf("-p: %w", err))
	}
	for _, tid := range o.tids {
		if _, err := attach.ProcessTgid(tid); err != nil {
			return cfg, badUsage(fmt.Errorf("-t: tid %d: no such thread", tid))
		}
	}
	cfg.TIDs = o.tids
	if o.cgroup != "" {
		if cfg.Cgroup, err = attach.OpenCgroup(o.cgroup); err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, attach.ErrNotCgroup2) {
				err = badUsage(err)
			}
			return cfg, err
		}
	}
	return cfg, nil
}

// selectCPUs parses -C and checks that every CPU in it is online.
func selectCPUs(list string) ([]int, error) {
	if list == "" {
		return nil, nil
	}
	cpus, err := attach.ParseCPUList(list)
	if err != nil {
		return nil, fmt.Errorf("-C: %w", err)
	}
	online, err := attach.OnlineCPUs()
	if err != nil {
		return nil, err
	}
	for _, c := range cpus {
		if !slices.Contains(online, c) {
			return nil, fmt.Errorf("-C: cpu %d is not online (online: %v)", c, online)
		}
	}
	return cpus, nil
}

// tgids turns -p pids (which may be thread ids) into process ids.
func tgids(pids []uint32) ([]uint32, error) {
	var out []uint32
	for _, pid := range pids {
		tgid, err := attach.ProcessTgid(pid)
		if err != nil {
			return nil, err
		}
		out = append(out, tgid)
	}
	return out, nil
}

// stopContext is done when the duration passes, at SIGINT/SIGTERM (see
// handleSignals), when the command (kid, if not nil) exits, or when the
// reader of the output went away.
func stopContext(d time.Duration, out *outFile, kid *child) (context.Context, context.CancelFunc) {
	var ctx context.Context
	var cancel context.CancelFunc
	if d > 0 {
		ctx, cancel = context.WithTimeout(context.Background(), d)
	} else {
		ctx, cancel = context.WithCancel(context.Background())
	}
	if kid != nil {
		kid.watch(cancel)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go handleSignals(sigs, cancel, out, kid)
	go func() { // nobody reads the output any more: stop
		select {
		case <-out.gone:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(); signal.Stop(sigs); close(sigs) }
}

// writeProfile writes the aggregated formats (text and JSON were streamed
// into bw already), flushes, and commits the output file.
func writeProfile(o *options, out *outFile, bw *bufio.Writer, res *recorder.Result) error {
	err := res.StreamErr
	if err == nil {
		switch o.format {
		case formatFolded:
			err = output.WriteFoldedOptions(bw, res.Aggregate, output.FoldedOptions{PerPID: o.perPID, PerThread: o.perTID, FullNames: o.fullName})
		case formatHTML:
			title := fmt.Sprintf("gprofile: %s, %d samples, %.1f s", res.Event.Name, res.Samples, res.Elapsed.Seconds())
			err = output.WriteFlameHTML(bw, res.Aggregate, title)
		case formatPprof:
			err = output.WritePprof(bw, res.Aggregate, pprofMeta(o, res))
		}
	}
	if err == nil {
		err = bw.Flush()
	}
	if isBrokenPipe(err) || out.isGone() {
		return errReaderGone
	}
	if err != nil {
		return writeError(o.output, res.Samples, err)
	}
	if res.Samples == 0 && !o.writeEmpty && out.keepPrevious() {
		return nil
	}
	if err := out.commit(); err != nil {
		return writeError(o.output, res.Samples, err)
	}
	return nil
}

// pprofMeta describes the run for the pprof profile: the value type and
// period follow the event (cpu/nanoseconds for cpu-clock at 1e9/f ns).
func pprofMeta(o *options, res *recorder.Result) output.Meta {
	ev := res.Event
	m := output.Meta{Start: res.Start, Duration: res.Elapsed, Comments: comments(o, res), Labels: o.labels}
	if ev.SampleType != "cpu" {
		m.ValueType, m.ValueUnit = ev.SampleType, "count"
	}
	if o.offCPU.on {
		m.DefaultType = output.WallType.Type
	}
	switch {
	case o.period != 0:
		m.Period = int64(o.period)
	case ev.EveryHit():
		m.Period = 1
	case ev.Unit == "nanoseconds":
		m.Period = int64(1e9 / o.freqHz)
	}
	return m
}

// errReaderGone: the reader of stdout (or of a FIFO) went away before the
// profile was written whole.
var errReaderGone = errors.New("the reader of the output went away")

func isBrokenPipe(err error) bool {
	return err != nil && errors.Is(err, syscall.EPIPE)
}

func comments(o *options, res *recorder.Result) []string {
	cn := res.Counters
	var uts unix.Utsname
	unix.Uname(&uts)
	host, _ := os.Hostname()
	lines := []string{
		"command: " + strings.Join(o.args, " "),
		fmt.Sprintf("event: %s, %s, cpus: %v, call graph: %s", res.Event.Name, rate(o, res.Event), res.CPUs, o.callGraph.String()),
		fmt.Sprintf("kernel: %s, host: %s", unix.ByteSliceToString(uts.Release[:]), host),
		fmt.Sprintf("samples lost: %d (ring buffer full), stacks not taken: kernel %d, user %d, exec/exit/fork records lost: %d",
			cn.Lost, cn.KernelStackErrors, cn.UserStackErrors, cn.EventsLost),
	}
	if line := recorder.StopSummary(res.UserStacks); line != "" {
		lines = append(lines, line+"; a cut stack's root frame is "+recorder.TruncatedFrame)
	}
	if o.callGraph.mode == attach.CallGraphDWARF && res.Samples > 0 {
		lines = append(lines, fmt.Sprintf("user stack windows: %d bytes copied (%d per sample), %d cut by the window size, %d ended at an unreadable page, %d stacks cut at a learned stack top",
			cn.WindowBytes, cn.WindowBytes/res.Samples, cn.WindowMax, cn.WindowFaults, res.StackTopCuts))
	}
	return lines
}

// cpuNotes writes one line per CPU that went offline or came online
// during the run (attach.SummarizeHotplug), and one naming the CPUs
// online at the end but not sampled.
func cpuNotes(w io.Writer, res *recorder.Result) {
	for _, line := range attach.SummarizeHotplug(res.Hotplug) {
		fmt.Fprintf(w, "gprofile: %s\n", line)
	}
	if res.HotplugMore > 0 {
		fmt.Fprintf(w, "gprofile: %d more CPU hotplug changes followed (see the gprofile_cpus_sampled metric)\n", res.HotplugMore)
	}
	if missed := res.MissedCPUs; len(missed) > 0 {
		fmt.Fprintf(w, "gprofile: cpus %v are online but were not sampled at the end: their perf events would not open (-v says why)\n", missed)
	}
}

// rate describes how often the event is sampled.
func rate(o *options, ev attach.Event) string {
	switch {
	case o.period != 0:
		return fmt.Sprintf("period: every %d events", o.period)
	case ev.EveryHit():
		return "period: every hit"
	}
	return fmt.Sprintf("frequency: %d Hz", o.freqHz)
}

// summarize prints the top table, the end-of-run line (and a second one about unnamed
// frames, when there are any).
func summarize(w io.Writer, o *options, out *outFile, res *recorder.Result) {
	if o.output != "-" && res.Samples > 0 && !o.quiet {
		output.WriteTop(w, res.Aggregate, 10)
	}
	if o.offCPU.on {
		offCPUSummary(w, res)
	}
	where := "to stdout"
	view := ""
	switch {
	case out.isGone():
		where = "nowhere: the reader of the output went away (broken pipe)"
	case out.kept:
		where = "nowhere: " + o.output + " keeps the previous profile (--write-empty writes an empty one)"
	case o.output != "-":
		where = "to " + o.output
		switch o.format {
		case formatPprof:
			view = "; view: gprofile view " + o.output + " (or go tool pprof -http=:8080 " + o.output + ")"
		case formatHTML:
			view = "; open it in a browser"
		}
	}
	cpuNotes(w, res)
	if res.Samples == 0 {
		fmt.Fprintf(w, "gprofile: 0 samples: nothing was sampled in %.1f s (did the targets run? see gprofile check)\n", res.Elapsed.Seconds())
	}
	fmt.Fprintf(w, "gprofile: %d samples (%d lost) in %.1f s on %d CPUs (%s) written %s%s\n",
		res.Samples, res.Counters.Lost, res.Elapsed.Seconds(), len(res.CPUs), res.Event.Name, where, view)
	if line := recorder.StopSummary(res.UserStacks); line != "" {
		fmt.Fprintf(w, "gprofile: %s\n", line)
	}
	st := res.Symbols
	if line := st.String(); line != "" { // frames of distinct stacks as kept (junk cut), each counted once
		fmt.Fprintf(w, "gprofile: %s\n", line)
	}
	cn := res.Counters
	if st.String() != "" || cn.Lost > 0 || cn.KernelStackErrors > 0 || cn.UserStackErrors > 0 {
		fmt.Fprintln(w, "gprofile: to see what was missing, run: gprofile check (-p PID for a process's binaries)")
	}
	if st.Frames[symbolize.ReasonNoAccess] > 0 && os.Geteuid() != 0 {
		fmt.Fprintln(w, "gprofile: reading other users' processes and binaries needs root or CAP_SYS_PTRACE")
	}
}
