package counter

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestScaleMultiplexed(t *testing.T) {
	// Ran a quarter of the time it was enabled: perf scales the count by
	// enabled/running and prints 25.00%.
	v, pct, ok := Scale(Count{Value: 1000, Enabled: 4000, Running: 1000})
	if !ok || v != 4000 || pct != 25 {
		t.Fatalf("Scale = %v, %v, %v; want 4000, 25, true", v, pct, ok)
	}
	if v, pct, ok := Scale(Count{Value: 7, Enabled: 10, Running: 10}); !ok || v != 7 || pct != 100 {
		t.Fatalf("Scale of a full run = %v, %v, %v", v, pct, ok)
	}
	if _, _, ok := Scale(Count{Value: 0, Enabled: 10, Running: 0}); ok {
		t.Fatal("a counter that never ran is counted")
	}
}

func TestMeanStderr(t *testing.T) {
	// 10, 12, 14: mean 12, s = 2, s/sqrt(3) = 1.1547.
	m, se := MeanStderr([]float64{10, 12, 14})
	if m != 12 || math.Abs(se-2/math.Sqrt(3)) > 1e-12 {
		t.Fatalf("MeanStderr = %v, %v; want 12, %v", m, se, 2/math.Sqrt(3))
	}
	if m, se := MeanStderr([]float64{5}); m != 5 || se != 0 {
		t.Fatalf("one value: %v, %v", m, se)
	}
	if got := relPct(12, 2/math.Sqrt(3)); math.Abs(got-9.6225) > 1e-3 {
		t.Fatalf("relPct = %v, want 9.62", got)
	}
}

func TestPrecision(t *testing.T) {
	for _, c := range []struct {
		x    float64
		want int
	}{{0.0000715, 5}, {0.000616, 4}, {0.05, 2}, {2, 0}} {
		if got := precision(c.x); got != c.want {
			t.Errorf("precision(%v) = %d, want %d", c.x, got, c.want)
		}
	}
}

// fixture: one run of the default set on a machine without PMU.
func oneRun() *Result {
	noPMU := errors.New("no hardware PMU here")
	return &Result{
		Target: "'ls'",
		Names:  []string{"task-clock", "context-switches", "page-faults", "cycles", "branches", "branch-misses"},
		Canon:  []string{"task-clock", "context-switches", "page-faults", "cycles", "branch-instructions", "branch-misses"},
		Runs: [][]Count{{
			{Value: 1690000, Enabled: 1690000, Running: 1690000},
			{Value: 0, Enabled: 1690000, Running: 1690000},
			{Value: 126, Enabled: 1690000, Running: 1690000},
			{Unsupported: noPMU}, {Unsupported: noPMU},
			{Value: 50, Enabled: 4000, Running: 1000},
		}},
		Elapsed: []float64{0.002647749},
		User:    0.002723, HaveRusage: true,
	}
}

func TestWriteTextLayout(t *testing.T) {
	var b bytes.Buffer
	WriteText(&b, oneRun())
	want := []string{
		"",
		" Performance counter stats for 'ls':",
		"",
		"              1.69 msec task-clock                       #    0.638 CPUs utilized          ",
		"                 0      context-switches                 #    0.000 /sec                   ",
		"               126      page-faults                      #   74.556 K/sec                  ",
		"   <not supported>      cycles                                                      ",
		"   <not supported>      branches                                                    ",
		"               200      branch-misses                    #  118.343 K/sec                    (25.00%)",
		"",
		"       0.002647749 seconds time elapsed",
		"",
		"       0.002723000 seconds user",
		"       0.000000000 seconds sys",
		"",
		"",
		"<not supported> cycles, branches: no hardware PMU here",
		"",
	}
	got := strings.Split(b.String(), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		for i := range max(len(got), len(want)) {
			var g, w string
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if g != w {
				t.Errorf("line %d:\n got %q\nwant %q", i, g, w)
			}
		}
	}
}

func TestWriteTextRuns(t *testing.T) {
	r := &Result{
		Target:  "'true'",
		Names:   []string{"task-clock", "page-faults", "instructions", "cycles", "branches", "branch-misses"},
		Canon:   []string{"task-clock", "page-faults", "instructions", "cycles", "branch-instructions", "branch-misses"},
		Elapsed: []float64{0.0011, 0.0012, 0.0013},
	}
	for _, pf := range []uint64{48, 48, 51} {
		full := func(v uint64) Count { return Count{Value: v, Enabled: 500000, Running: 500000} }
		r.Runs = append(r.Runs, []Count{full(500000), full(pf), full(3000000), full(2000000), full(400000), full(4000)})
	}
	var b bytes.Buffer
	WriteText(&b, r)
	for _, want := range []string{
		" Performance counter stats for 'true' (3 runs):",
		"              0.50 msec task-clock                       #    0.417 CPUs utilized          \n",
		"                49      page-faults                      #   98.000 K/sec                    ( +-  2.04% )\n",
		"         3000000      instructions                     #    1.50  insn per cycle         \n",
		"         2000000      cycles                           #    4.000 GHz                    \n",
		"            4000      branch-misses                    #    1.00% of all branches        \n",
		"         0.0012000 +- 0.0000577 seconds time elapsed  ( +-  4.81% )\n\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "seconds user") {
		t.Error("user time printed for several runs (perf prints it for one)")
	}
}

func TestWriteCSVAndJSON(t *testing.T) {
	var b bytes.Buffer
	WriteCSV(&b, oneRun(), ",")
	for _, want := range []string{
		"1.69,msec,task-clock,1690000,100.00,0.638,CPUs utilized\n",
		"126,,page-faults,1690000,100.00,74.556,K/sec\n",
		"<not supported>,,cycles,0,100.00,,\n",
		"200,,branch-misses,1000,25.00,118.343,K/sec\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("CSV lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	WriteJSON(&b, oneRun())
	for _, want := range []string{
		`{"counter-value" : "1.690000", "unit" : "msec", "event" : "task-clock", "event-runtime" : 1690000, "pcnt-running" : 100.00, "metric-value" : 0.638278, "metric-unit" : "CPUs utilized"}` + "\n",
		`{"counter-value" : "<not supported>", "unit" : "", "event" : "cycles", "event-runtime" : 0, "pcnt-running" : 100.00, "metric-value" : 0.000000, "metric-unit" : ""}` + "\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("JSON lacks %q:\n%s", want, b.String())
		}
	}
}

func TestNotCounted(t *testing.T) {
	r := &Result{Target: "'x'", Names: []string{"page-faults"}, Runs: [][]Count{{{Value: 0, Enabled: 0, Running: 0}}}, Elapsed: []float64{1}}
	var b bytes.Buffer
	WriteText(&b, r)
	if !strings.Contains(b.String(), "     <not counted>      page-faults") {
		t.Fatalf("no <not counted>:\n%s", b.String())
	}
}
