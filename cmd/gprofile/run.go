package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/output"
	"github.com/gprofile/gprofile/internal/symbolize"
	"golang.org/x/sys/unix"
)

// run checks the input, samples until the duration ends or a signal
// arrives, and writes the profile. Every check that can fail on bad input
// runs before sampling starts.
func run(o *options) error {
	targets, err := checkInput(o)
	if err != nil {
		return err
	}
	out, err := createOut(o.output)
	if err != nil {
		return err
	}
	defer out.abort()

	sym, err := symbolize.New(symbolize.Options{})
	if err != nil {
		return err
	}
	defer sym.Close()
	if note := sym.Note(); note != "" {
		fmt.Fprintf(os.Stderr, "gprofile: %s\n", note)
	}
	cfg := attach.Config{FrequencyHz: o.freqHz, PIDs: targets, SoftwareEvent: o.swEvent, IncludeIdle: o.idle, Log: os.Stderr}
	if o.verbose {
		cfg.Verbose = os.Stderr
	}
	s, err := attach.Open(cfg)
	if err != nil {
		return err
	}
	defer s.Close()

	ctx, stop := stopContext(o.duration, out)
	defer stop()
	c := newCollector(sym, s.Event(), o.freqHz)
	start := time.Now()
	if err := s.Run(ctx, c.add); err != nil {
		return err
	}
	elapsed := time.Since(start)
	counters, err := s.Counters()
	if err != nil {
		return err
	}
	if err := writeProfile(o, out, c, s, start, elapsed, counters); err != nil {
		return err
	}
	summarize(os.Stderr, o, c, s, elapsed, counters, sym.Stats())
	return nil
}

// checkInput rejects what would fail later, before anything is opened:
// privileges, the frequency, and pids (turned into tgids).
func checkInput(o *options) ([]uint32, error) {
	if err := attach.CheckPrivileges(); err != nil {
		return nil, err
	}
	if err := attach.CheckFrequency(o.freqHz); err != nil {
		return nil, err
	}
	if o.pids == nil {
		return nil, nil
	}
	var tgids []uint32
	for _, pid := range o.pids {
		tgid, err := attach.ProcessTgid(pid)
		if err != nil {
			return nil, err
		}
		tgids = append(tgids, tgid)
	}
	return tgids, nil
}

// stopContext is done when the duration passes or at SIGINT/SIGTERM. A
// second SIGINT after that aborts at once, removing the unfinished output.
func stopContext(d time.Duration, out *outFile) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	if d > 0 {
		ctx, cancel = context.WithTimeout(context.Background(), d)
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		n := 0
		for range sigs {
			if n++; n == 1 {
				cancel()
				continue
			}
			out.abort()
			fmt.Fprintln(os.Stderr, "gprofile: interrupted twice, nothing written")
			os.Exit(130)
		}
	}()
	return ctx, func() { cancel(); signal.Stop(sigs); close(sigs) }
}

func writeProfile(o *options, out *outFile, c *collector, s *attach.Sampler, start time.Time, elapsed time.Duration, cn attach.Counters) error {
	bw := bufio.NewWriterSize(out.writer(), 1<<16)
	var err error
	if o.folded {
		err = output.WriteFolded(bw, c.agg.Samples())
	} else {
		meta := output.Meta{
			Start:       start,
			Duration:    elapsed,
			PeriodNanos: int64(1e9 / o.freqHz),
			Comments:    comments(o, s, cn),
		}
		err = output.WritePprof(bw, c.agg.Samples(), meta)
	}
	if err == nil {
		err = bw.Flush()
	}
	if isBrokenPipe(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", o.output, err)
	}
	return out.commit()
}

func isBrokenPipe(err error) bool {
	return err != nil && errors.Is(err, syscall.EPIPE)
}

func comments(o *options, s *attach.Sampler, cn attach.Counters) []string {
	var uts unix.Utsname
	unix.Uname(&uts)
	host, _ := os.Hostname()
	return []string{
		"command: " + strings.Join(o.args, " "),
		fmt.Sprintf("event: %s, frequency: %d Hz, cpus: %v", s.Event().Name, o.freqHz, s.CPUs()),
		fmt.Sprintf("kernel: %s, host: %s", unix.ByteSliceToString(uts.Release[:]), host),
		fmt.Sprintf("samples lost: %d (ring buffer full), stacks not taken: kernel %d, user %d",
			cn.Lost, cn.KernelStackErrors, cn.UserStackErrors),
	}
}

// summarize prints the end-of-run line (and a second one about unnamed
// frames, when there are any).
func summarize(w io.Writer, o *options, c *collector, s *attach.Sampler, elapsed time.Duration, cn attach.Counters, st symbolize.Stats) {
	where := "to stdout"
	view := ""
	if o.output != "-" {
		where = "to " + o.output
		if !o.folded {
			view = "; view: go tool pprof -http=:8080 " + o.output
		}
	}
	fmt.Fprintf(w, "gprofile: %d samples (%d lost) in %.1f s on %d CPUs (%s) written %s%s\n",
		c.samples, cn.Lost, elapsed.Seconds(), len(s.CPUs()), s.Event().Name, where, view)
	if line := st.String(); line != "" { // frames of distinct stacks, each symbolized once
		fmt.Fprintf(w, "gprofile: %s\n", line)
	}
}
