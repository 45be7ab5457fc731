package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/output"
	"github.com/gprofile/gprofile/internal/recorder"
)

// offCPUFlags are --off-cpu and its companions.
type offCPUFlags struct {
	on, only, runnable bool
	min                time.Duration // --off-cpu-min; 0 for attach.DefaultOffCPUMin
}

// register adds the off-CPU flags to fs.
func (f *offCPUFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.on, "off-cpu", false, "also record where the targets block (sleeps S, waits D), weighted by the time blocked in ns: one profile of on-CPU, off-CPU and wall time (needs -p, -t, --cgroup or -- CMD)")
	fs.BoolVar(&f.only, "off-cpu-only", false, "record only off-CPU time (no CPU samples)")
	fs.Var((*durationFlag)(&f.min), "off-cpu-min", "blocks shorter than this `duration` are counted without stacks, summed per process as one [off-cpu:S < DUR] stack (default 1ms)")
	fs.BoolVar(&f.runnable, "off-cpu-runnable", false, "with --off-cpu, also count the time a thread waits for a CPU after being preempted (state R)")
}

// check rejects off-CPU flags that make no sense with the rest of o.
func (f *offCPUFlags) check(o *options, set map[string]bool) error {
	if f.only {
		f.on = true
	}
	if !f.on {
		for _, name := range []string{"off-cpu-min", "off-cpu-runnable"} {
			if set[name] {
				return fmt.Errorf("--%s needs --off-cpu", name)
			}
		}
		return nil
	}
	if o.pids == nil && o.tids == nil && o.cgroup == "" && o.command == nil {
		return errors.New("--off-cpu needs a target (-p, -t, --cgroup or -- CMD): whole-system off-CPU time is mostly idle thread pools and kernel threads waiting for work")
	}
	if len(o.probes) > 0 {
		return fmt.Errorf("--off-cpu with -e %s: off-CPU time goes with CPU time from cpu-clock, not probe hits; profile the probes in a run of their own", o.probes[0])
	}
	if o.event != "" && o.event != "cpu-clock" && o.event != "task-clock" {
		return fmt.Errorf("--off-cpu with -e %s: off-CPU time is in ns, so CPU samples must be too: use -e cpu-clock (the default with --off-cpu)", o.event)
	}
	if o.period != 0 && o.period < 10000 {
		return fmt.Errorf("--off-cpu with -c %d: cpu-clock periods are ns; want at least 10000 (or use -f)", o.period)
	}
	return nil
}

// attachConfig is the sampler's off-CPU configuration, nil when off.
func (f *offCPUFlags) attachConfig() *attach.OffCPUConfig {
	if !f.on {
		return nil
	}
	return &attach.OffCPUConfig{MinBlock: f.min, Runnable: f.runnable, Only: f.only}
}

// offCPUNote tells, on stderr, what the weights of a folded, flame or
// top output mean with --off-cpu: they are ns, not sample counts.
func offCPUNote(w io.Writer, o *options) {
	if !o.offCPU.on || o.quiet {
		return
	}
	switch o.format {
	case formatFolded, formatHTML:
		fmt.Fprintln(w, "gprofile: --off-cpu: stack weights are wall-clock ns (on-CPU + off-CPU), not sample counts; off-CPU stacks end in [off-cpu:STATE]")
	}
}

// offCPUSummary is the end-of-run line of --off-cpu: the time on and off
// CPU recorded, and the blocks.
func offCPUSummary(w io.Writer, res *recorder.Result) {
	a := res.Aggregate
	var off, wall int64
	for i, c := range a.Columns() {
		switch c {
		case output.OffCPUType:
			off = a.ColumnTotal(output.Column(2 + i))
		case output.WallType:
			wall = a.ColumnTotal(output.Column(2 + i))
		}
	}
	oc := res.OffCPU
	fmt.Fprintf(w, "gprofile: off-CPU: %v blocked in %d blocks (%d with stacks, %d summed short records, %d lost), %v on CPU\n",
		time.Duration(off).Round(time.Microsecond), oc.Blocks, oc.Long, oc.Short, oc.Lost, time.Duration(wall-off).Round(time.Microsecond))
}
