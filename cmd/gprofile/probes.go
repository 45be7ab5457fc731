package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/probe"
)

// probeSyntax is the probe part of -l: bpftrace's syntax, with examples.
const probeSyntax = `
Probes (-e, repeatable: a stack on every hit; -c N keeps every Nth hit)
  kprobe:SYM[+OFF]              entry of a kernel function          -e kprobe:do_sys_openat2
  kprobe:GLOB                   every kernel function it matches     -e 'kprobe:tcp_*'
  kretprobe:SYM                 return of a kernel function          -e kretprobe:vfs_read
  uprobe:PATH:SYM[+OFF]         function of a binary or library      -e uprobe:/usr/bin/bash:readline
  uprobe:LIB:SYM                library by name (targets' maps)      -e uprobe:libc:malloc
  uretprobe:PATH:SYM            return of a function                 -e uretprobe:libc:malloc
  usdt:PATH:PROVIDER:NAME       SystemTap/DTrace USDT probe          -e usdt:/usr/bin/python3:python:function__entry
  GROUP:EVENT                   a probe event made by perf probe     -e probe_libc:malloc
  gprofile -l 'kprobe:vfs_*'    lists the kernel functions a pattern matches
  gprofile -l 'uprobe:PATH:*'   lists a binary's functions; gprofile -l usdt:PATH its USDT probes
  Before attaching, gprofile counts the probes' hits for a moment and refuses
  when sampling them would cost more than a few percent of a CPU (--force).
`

// writeProbeSyntax writes the probe section of -l.
func writeProbeSyntax(w io.Writer) error {
	_, err := io.WriteString(w, probeSyntax)
	return err
}

// listProbes writes, one a line, the probes pattern matches: kernel
// functions (kprobe:GLOB), a binary's functions (uprobe:PATH:GLOB) or USDT
// probes (usdt:PATH[:PROVIDER:NAME glob]).
func listProbes(w io.Writer, pattern string) error {
	kind, rest, _ := strings.Cut(pattern, ":")
	bw := bufio.NewWriter(w)
	var err error
	switch kind {
	case "kprobe", "kretprobe":
		err = listKernel(bw, kind, rest)
	case "uprobe", "uretprobe":
		err = listUser(bw, kind, rest)
	case "usdt":
		err = listUSDT(bw, rest)
	default:
		err = badUsage(fmt.Errorf("-l %s: want kprobe:GLOB, uprobe:PATH:GLOB or usdt:PATH (or -l alone)", pattern))
	}
	if err != nil {
		return err
	}
	return bw.Flush()
}

func listKernel(w io.Writer, kind, glob string) error {
	if glob == "" {
		glob = "*"
	}
	funcs, err := attach.KernelFuncs(glob)
	if err != nil {
		return err
	}
	if len(funcs) == 0 {
		return badUsage(fmt.Errorf("-l %s:%s: no traceable kernel function matches", kind, glob))
	}
	for _, f := range funcs {
		fmt.Fprintf(w, "%s:%s\n", kind, f)
	}
	return nil
}

func listUser(w io.Writer, kind, rest string) error {
	path, glob := rest, "*"
	if i := strings.LastIndex(rest, ":"); i >= 0 {
		path, glob = rest[:i], rest[i+1:]
	}
	bin, err := attach.ResolveBinary(path, nil)
	if err != nil {
		return badUsage(fmt.Errorf("-l %s:%s: %w", kind, rest, err))
	}
	f, err := os.Open(bin)
	if err != nil {
		return err
	}
	defer f.Close()
	funcs, err := probe.Funcs(f)
	if err != nil {
		return badUsage(fmt.Errorf("-l %s:%s: %s: %w", kind, rest, bin, err))
	}
	matched, err := probe.Match(funcs, glob)
	if err != nil {
		return badUsage(err)
	}
	for _, fn := range matched {
		fmt.Fprintf(w, "%s:%s:%s\n", kind, bin, fn.Name)
	}
	return nil
}

func listUSDT(w io.Writer, rest string) error {
	parts := strings.Split(rest, ":")
	path, glob := rest, "*:*"
	if len(parts) >= 3 {
		path, glob = strings.Join(parts[:len(parts)-2], ":"), strings.Join(parts[len(parts)-2:], ":")
	}
	bin, err := attach.ResolveBinary(path, nil)
	if err != nil {
		return badUsage(fmt.Errorf("-l usdt:%s: %w", rest, err))
	}
	f, err := os.Open(bin)
	if err != nil {
		return err
	}
	defer f.Close()
	notes, err := probe.Notes(f)
	if errors.Is(err, probe.ErrNoNotes) {
		return badUsage(fmt.Errorf("-l usdt:%s: %s has %w", rest, bin, err))
	}
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, n := range notes {
		name := n.Provider + ":" + n.Name
		if ok, _ := matchGlob(glob, name); ok && !seen[name] {
			seen[name] = true
			sem := ""
			if n.Semaphore != 0 {
				sem = " (semaphore)"
			}
			fmt.Fprintf(w, "usdt:%s:%s%s\n", bin, name, sem)
		}
	}
	return nil
}

// matchGlob matches provider:name against a provider:name glob.
func matchGlob(glob, name string) (bool, error) {
	m, err := probe.Match([]probe.Func{{Name: name}}, glob)
	return len(m) == 1, err
}

// probeCountWindow is how long guardProbeCost counts hits.
const probeCountWindow = 250 * time.Millisecond

// maxProbeCPU is the share of one CPU that sampling probes may cost
// without --force.
const maxProbeCPU = 0.03

// guardProbeCost counts the probes' hits for probeCountWindow before the
// real run and refuses, with the numbers, when sampling them at that rate
// would cost more than maxProbeCPU of a CPU (per-hit costs:
// attach.ProbeKind.Cost). With -- CMD the command has not started yet:
// only the rest of the system's hits are seen.
func guardProbeCost(o *options, cfg attach.Config) error {
	if len(cfg.Probes) == 0 || o.force {
		return nil
	}
	cfg.Log, cfg.Verbose = io.Discard, nil
	s, err := attach.Open(cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	hits, err := s.CountProbes(probeCountWindow)
	if err != nil {
		return err
	}
	every := max(o.period, 1)
	var total float64
	var parts []string
	for i, p := range cfg.Probes {
		rate := float64(hits[i]) / probeCountWindow.Seconds()
		c := p.Kind.Cost()
		perHit := c.Hit + c.Sample/time.Duration(every)
		share := rate * perHit.Seconds()
		total += share
		parts = append(parts, fmt.Sprintf("%s: %d hits in %v (%.0f/s × %.1f µs)", p.Spec, hits[i], probeCountWindow, rate, float64(perHit.Nanoseconds())/1e3))
	}
	if total <= maxProbeCPU {
		return nil
	}
	return fmt.Errorf("sampling these probes would cost about %.0f%% of a CPU (%s); narrow them (-p PID, a less busy function), keep every Nth hit (-c N), or pass --force",
		100*total, strings.Join(parts, "; "))
}
