package attach

import (
	"bufio"
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/gprofile/gprofile/internal/testutil"
)

// BenchmarkProbeHit measures what one hit of a uprobe costs the traced
// thread: testdata/probed calls probed() b.N times and times the calls
// itself; ns/hit is the time a call took with the probe minus without.
// Modes: count (probe_mode PROBE_COUNT: the trap and the count, what
// every hit pays) and sample with each call graph (the BPF record: the
// registers and stack window, or the frame-pointer walk), with a reader
// draining the ring buffer. gprofile's own CPU per sample (reading,
// unwinding, symbolizing) is not in it: BENCHMARKS.md "Probes" measures
// that end to end. These are attach.ProbeKind.Cost's numbers.
func BenchmarkProbeHit(b *testing.B) {
	testutil.RequirePrivileges(b)
	bin := testutil.BuildC(b, "testdata/probed.c", "-O2", "-g", "-fno-omit-frame-pointer", "-I/usr/include/x86_64-linux-gnu")
	for _, mode := range []struct {
		name string
		mode uint32
		cg   CallGraph
	}{{"none", probeOff, CallGraphFP}, {"count", probeCount, CallGraphFP}, {"sample-fp", probeSample, CallGraphFP}, {"sample-dwarf", probeSample, CallGraphDWARF}} {
		b.Run(mode.name, func(b *testing.B) {
			var ns float64
			if mode.name == "none" {
				ns = timedCalls(b, bin, b.N, nil)
			} else {
				p, err := ParseProbe("uprobe:"+bin+":probed", nil)
				if err != nil {
					b.Fatal(err)
				}
				s, err := Open(Config{Probes: []Probe{p}, CallGraph: mode.cg})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				if mode.mode == probeSample {
					go func() { done <- s.Run(ctx, func(*Sample) {}) }()
				} else {
					close(done)
				}
				ns = timedCalls(b, bin, b.N, func() {
					if err := s.setProbeMode(mode.mode); err != nil {
						b.Fatal(err)
					}
				})
				cancel()
				<-done
			}
			b.ReportMetric(ns, "ns/call")
		})
	}
}

// timedCalls runs probed timed n after calling ready (when not nil) and
// returns the ns per call it printed.
func timedCalls(b *testing.B, bin string, n int, ready func()) float64 {
	cmd := exec.Command(bin, "timed", strconv.Itoa(n))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer cmd.Wait()
	r := bufio.NewReader(stdout)
	if l, _ := r.ReadString('\n'); l != "ready\n" {
		b.Fatalf("probed: %q", l)
	}
	if ready != nil {
		ready()
	}
	b.ResetTimer()
	stdin.Write([]byte("go\n"))
	stdin.Close()
	l, _ := r.ReadString('\n')
	b.StopTimer()
	f, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(l, "ns ")), 64)
	if err != nil {
		b.Fatalf("probed: %q", l)
	}
	return f
}
