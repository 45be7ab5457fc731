package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/pprof/profile"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/output"
	"github.com/gprofile/gprofile/internal/push"
	"github.com/gprofile/gprofile/internal/recorder"
	"golang.org/x/sys/unix"
)

// closeTimeout bounds how long gprofile, once stopped, tries to deliver
// the profiles still queued.
const closeTimeout = 10 * time.Second

// continuous is a continuous run's side of the intervals: it turns each
// into pprof profiles, one per service, and queues them for the backend
// and/or writes it to a --switch-output file. Its methods run on the
// recorder's interval goroutine, but for the counters, which the metrics
// handler reads.
type continuous struct {
	o        *options
	queue    *push.Queue   // nil without --push
	files    *switchWriter // nil without --switch-output
	services *serviceNamer
	gz       gzipEncoder       // the profiles pushed
	labels   map[string]string // host, kernel, --label: every profile's
	event    attach.Event
	last     attach.Counters // at the end of the previous interval

	intervals, profiles atomic.Uint64
	lost                atomic.Uint64 // samples lost, from the counters of the last interval
	errs                atomic.Uint64 // intervals that could not be built or written
	buildNanos          atomic.Int64  // wall time in onInterval: pprof build, split, gzip, file write
	buildCPUNanos       atomic.Int64  // CPU time of the same (its thread's)
}

// newContinuous prepares the output of a continuous run: the backend
// and its queue, the file writer. Its errors are bad input (the URL, a
// credentials file): nothing is sampled yet.
func newContinuous(o *options) (*continuous, error) {
	c := &continuous{o: o, services: newServiceNamer(o.cont.service), labels: baseLabels(o.cont.labels)}
	if o.cont.push != "" {
		po, err := pushOptions(&o.cont, os.Getenv)
		if err != nil {
			return nil, badUsage(err)
		}
		b, err := push.Open(o.cont.push, po)
		if err != nil {
			return nil, badUsage(fmt.Errorf("--push: %w", err))
		}
		logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "gprofile: "+format+"\n", args...) }
		c.queue = push.NewQueue(b, push.QueueOptions{MaxBytes: o.cont.queueBytes, Logf: logf})
	}
	if o.cont.switchOutput > 0 {
		c.files = newSwitchWriter(o)
	}
	return c, nil
}

// baseLabels returns the labels of every profile: host (the host name),
// kernel (its release) and the --label pairs, which override them.
func baseLabels(extra []string) map[string]string {
	var uts unix.Utsname
	unix.Uname(&uts)
	host, _ := os.Hostname()
	m := map[string]string{"host": host, "kernel": unix.ByteSliceToString(uts.Release[:])}
	for _, kv := range extra {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// onInterval builds the interval's profile, splits it by service and
// hands each part to the queue; --switch-output writes it whole. An
// interval of no samples sends and writes nothing. An error is logged
// and counted: the run goes on.
func (c *continuous) onInterval(iv recorder.Interval) {
	// The interval's CPU time is its thread's: the goroutine keeps its
	// thread meanwhile.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t0, cpu0 := time.Now(), threadCPU()
	defer func() {
		// Counted after its build time, so that a metrics page that
		// shows an interval shows what it cost.
		c.buildNanos.Add(int64(time.Since(t0)))
		c.buildCPUNanos.Add(int64(threadCPU() - cpu0))
		if c.intervals.Add(1) == 1 {
			settleGC()
		}
	}()
	lost := iv.Counters.Lost - c.last.Lost
	c.last = iv.Counters
	c.lost.Store(iv.Counters.Lost)
	if iv.Samples == 0 {
		return
	}
	meta := c.meta(iv, lost)
	p, err := output.BuildPprof(iv.Aggregate, meta)
	if err != nil {
		c.fail(err)
		return
	}
	if c.files != nil {
		name, err := c.files.write(iv.Aggregate, p, iv.Start, iv.Samples)
		if err != nil {
			c.fail(err)
		} else if c.o.verbose {
			fmt.Fprintf(os.Stderr, "gprofile: %d samples written to %s\n", iv.Samples, name)
		}
	}
	if c.queue == nil {
		return
	}
	for _, part := range splitServices(p, c.services) {
		data, err := c.gz.encode(part.Profile)
		if err != nil {
			c.fail(err)
			continue
		}
		labels := make(map[string]string, len(c.labels)+1)
		for k, v := range c.labels {
			labels[k] = v
		}
		labels[push.LabelServiceName] = part.Key
		c.queue.Add(&push.Profile{Data: data, Profile: part.Profile, Labels: labels, Start: iv.Start, Duration: iv.Duration})
		c.profiles.Add(1)
	}
}

// gzipEncoder writes gzipped pprof profiles with one gzip writer, reset
// for each, at gzip.BestSpeed: a profile of a service is a few kB, for
// which a new writer at the default level (profile.Profile.Write) costs
// more to set up than to compress.
type gzipEncoder struct {
	buf bytes.Buffer
	zw  *gzip.Writer
}

// encode returns p as a gzipped pprof, in a slice of its own.
func (e *gzipEncoder) encode(p *profile.Profile) ([]byte, error) {
	e.buf.Reset()
	if e.zw == nil {
		e.zw, _ = gzip.NewWriterLevel(&e.buf, gzip.BestSpeed) // the level is valid
	} else {
		e.zw.Reset(&e.buf)
	}
	if err := output.EncodePprof(e.zw, p); err != nil {
		return nil, fmt.Errorf("write pprof profile: %w", err)
	}
	if err := e.zw.Close(); err != nil {
		return nil, fmt.Errorf("write pprof profile: %w", err)
	}
	return bytes.Clone(e.buf.Bytes()), nil
}

// threadCPU returns the CPU time the calling thread has used
// (CLOCK_THREAD_CPUTIME_ID), or 0 when the clock cannot be read.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// fail logs an interval's error and counts it.
func (c *continuous) fail(err error) {
	c.errs.Add(1)
	fmt.Fprintf(os.Stderr, "gprofile: interval: %v\n", err)
}

// meta describes an interval for its pprof: the run's value type and
// period, the interval's time, and comments that say what was lost in
// it and what the queue dropped since the previous profile.
func (c *continuous) meta(iv recorder.Interval, lost uint64) output.Meta {
	res := recorder.Result{Start: iv.Start, Elapsed: iv.Duration, Samples: iv.Samples, Counters: iv.Counters, Event: c.event}
	m := pprofMeta(c.o, &res)
	m.Comments = []string{
		"command: " + strings.Join(c.o.args, " "),
		fmt.Sprintf("event: %s, %s, call graph: %s", c.event.Name, rate(c.o, c.event), c.o.callGraph.String()),
		fmt.Sprintf("kernel: %s, host: %s", c.labels["kernel"], c.labels["host"]),
		fmt.Sprintf("interval: %d samples, %d lost (ring buffer full)", iv.Samples, lost),
	}
	if c.queue != nil {
		if n, b := c.queue.TakeDropped(); n > 0 {
			m.Comments = append(m.Comments, fmt.Sprintf("push: %d earlier profile(s), %d bytes, dropped (backend down, slow or refusing; see the log)", n, b))
		}
	}
	m.Labels = slices.Clone(c.o.labels)
	if !slices.Contains(m.Labels, output.LabelCgroup) && c.o.cont.service == "" && c.queue != nil {
		m.Labels = append(m.Labels, output.LabelCgroup)
	}
	return m
}

// metrics are what --metrics serves.
func (c *continuous) metrics(rec *recorder.Recorder) []metric {
	ms := []metric{
		{"gprofile_samples_total", "counter", "Samples read from the ring buffer.", func() float64 { return float64(rec.Samples()) }},
		{"gprofile_samples_lost_total", "counter", "Samples lost because the ring buffer was full (at the last interval's end).", func() float64 { return float64(c.lost.Load()) }},
		{"gprofile_intervals_total", "counter", "Intervals ended.", func() float64 { return float64(c.intervals.Load()) }},
		{"gprofile_interval_errors_total", "counter", "Intervals whose profile could not be built or written.", func() float64 { return float64(c.errs.Load()) }},
		{"gprofile_interval_build_seconds_total", "counter", "Wall time spent turning intervals into profiles: pprof build, split by service, gzip, --switch-output write (the send is the queue's, not counted).", func() float64 { return float64(c.buildNanos.Load()) / 1e9 }},
		{"gprofile_interval_build_cpu_seconds_total", "counter", "CPU time of the same work, on its thread (the garbage collector's own threads not counted).", func() float64 { return float64(c.buildCPUNanos.Load()) / 1e9 }},
		{"gprofile_cpus_sampled", "gauge", "CPUs sampled now (CPU hotplug is followed once a second).", func() float64 { return float64(len(rec.CPUs())) }},
		{"gprofile_cpu_hotplug_changes_total", "counter", "CPUs seen going offline or coming online.", func() float64 { ch, more := rec.Hotplug(); return float64(len(ch) + more) }},
	}
	if c.queue != nil {
		stat := func(f func(push.Stats) float64) func() float64 { return func() float64 { return f(c.queue.Stats()) } }
		ms = append(ms,
			metric{"gprofile_push_profiles_total", "counter", "Profiles queued for the backend (one per interval and service).", func() float64 { return float64(c.profiles.Load()) }},
			metric{"gprofile_push_sent_total", "counter", "Profiles the backend accepted.", stat(func(s push.Stats) float64 { return float64(s.Sent) })},
			metric{"gprofile_push_sent_bytes_total", "counter", "Bytes of profiles the backend accepted.", stat(func(s push.Stats) float64 { return float64(s.SentBytes) })},
			metric{"gprofile_push_errors_total", "counter", "Failed push attempts (each retry counts).", stat(func(s push.Stats) float64 { return float64(s.Errors) })},
			metric{"gprofile_push_dropped_total", "counter", "Profiles dropped: queue full, refused for good, or left at exit.", stat(func(s push.Stats) float64 { return float64(s.Dropped) })},
			metric{"gprofile_push_queue_bytes", "gauge", "Bytes of profiles waiting for the backend.", stat(func(s push.Stats) float64 { return float64(s.QueuedBytes) })},
			metric{"gprofile_push_queue_profiles", "gauge", "Profiles waiting for the backend.", stat(func(s push.Stats) float64 { return float64(s.Queued) })},
		)
	}
	return append(ms, processMetrics()...)
}

// runContinuous profiles until stopped (a signal, -d, or the command's
// exit), one profile every --interval, pushed and/or written to files
// (continuous), with --metrics served meanwhile. Bad input fails before
// sampling starts. It returns the exit status: the command's with --
// CMD, else 0.
func runContinuous(o *options) (int, error) {
	c, err := newContinuous(o)
	if err != nil {
		return 1, err
	}
	cfg, err := recorderConfig(o)
	if err != nil {
		return 1, err
	}
	limitProcs(&cfg.Sampling)
	if o.cont.service == "" && c.queue != nil && !slices.Contains(cfg.Labels, output.LabelCgroup) {
		cfg.Labels = append(slices.Clone(cfg.Labels), output.LabelCgroup) // names the services
	}
	cfg.Interval, cfg.OnInterval = o.cont.interval, c.onInterval
	var kid *child
	if o.command != nil {
		if kid, err = startChild(o.command); err != nil {
			return 1, err
		}
		defer kid.kill()
		cfg.Sampling.PIDs, cfg.Sampling.AtExec = []uint32{uint32(kid.cmd.Process.Pid)}, true
	}
	rec, err := recorder.New(cfg)
	if err != nil {
		return 1, err
	}
	defer rec.Close()
	c.event = rec.Event()
	ctx, stop := continuousContext(o.duration, kid)
	defer stop()
	if o.cont.metrics != "" {
		addr, err := serveMetrics(ctx, o.cont.metrics, c.metrics(rec))
		if err != nil {
			return 1, badUsage(err)
		}
		if o.verbose {
			fmt.Fprintf(os.Stderr, "gprofile: metrics on http://%s/metrics\n", addr)
		}
	}
	if kid != nil {
		if err := kid.start(); err != nil {
			return 1, err
		}
	}
	if !o.quiet {
		fmt.Fprintf(os.Stderr, "gprofile: profiling until stopped, a profile every %v%s\n", o.cont.interval, c.where())
	}
	res, err := rec.Run(ctx)
	c.finish(&res)
	if err != nil {
		return 1, err
	}
	if kid != nil {
		return exitCode(kid.wait()), nil
	}
	return 0, nil
}

// where says where the profiles go, for the start line.
func (c *continuous) where() string {
	s := ""
	if c.o.cont.push != "" {
		s += " to " + c.o.cont.push
	}
	if c.files != nil {
		s += " in " + filepath.Join(c.files.dir, c.files.base+".TIME"+c.files.ext)
	}
	return s
}

// finish delivers what is queued (for up to closeTimeout) and prints the
// run's summary line.
func (c *continuous) finish(res *recorder.Result) {
	line := fmt.Sprintf("gprofile: %d samples (%d lost) in %.1f s, %d intervals", res.Samples, res.Counters.Lost, res.Elapsed.Seconds(), c.intervals.Load())
	if c.queue != nil {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		st := c.queue.Close(ctx)
		cancel()
		line += fmt.Sprintf(", %d profiles pushed, %d dropped, %d push errors", st.Sent, st.Dropped, st.Errors)
	}
	if n := c.errs.Load(); n > 0 {
		line += fmt.Sprintf(", %d intervals failed (see above)", n)
	}
	if !c.o.quiet || c.errs.Load() > 0 {
		fmt.Fprintln(os.Stderr, line)
	}
	if !c.o.quiet {
		cpuNotes(os.Stderr, res)
	}
}

// continuousContext is done when the duration passes (d > 0), at the
// first SIGINT or SIGTERM (as systemd stops a service), or when the
// command (kid, if not nil) exits.
func continuousContext(d time.Duration, kid *child) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	if d > 0 {
		ctx, cancel = context.WithTimeout(context.Background(), d)
	}
	if kid != nil {
		kid.watch(cancel)
	}
	sctx, sstop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	return sctx, func() { sstop(); cancel() }
}
