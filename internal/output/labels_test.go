package output

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/gprofile/gprofile/internal/symbolize"
)

// aggregateByThread adds the fixture's samples keyed by pid, tid, cpu and
// comm.
func (fx *fixture) aggregateByThread() *Aggregator {
	a := NewAggregator()
	for _, s := range fx.samples() {
		m := s.meta
		addSample(a, SampleKey{PID: m.PID, TID: m.TID, CPU: m.CPU, Comm: m.Comm}, s.stack, fixturePeriod)
	}
	return a
}

func TestAggregatorKeys(t *testing.T) {
	st := &symbolize.Stack{Frames: []symbolize.Frame{{Address: 0x10, Function: "a"}}}
	a := &Aggregator{}
	addSample(a, SampleKey{PID: 7, TID: 8, CPU: 1, Comm: "w"}, st, 1)
	addSample(a, SampleKey{PID: 7, TID: 8, CPU: 1, Comm: "w"}, st, 2)
	addSample(a, SampleKey{PID: 7, TID: 8, CPU: 0, Comm: "w"}, st, 4)
	addSample(a, SampleKey{PID: 7, TID: 9, CPU: 0, Comm: "w"}, st, 8)
	add(a, 7, "w", st, 16) // tid and cpu 0
	addSample(a, SampleKey{PID: 7, Comm: "w"}, st, 32)
	want := []Sample{
		{PID: 7, TID: 0, CPU: 0, Comm: "w", Stack: st, Count: 2, Nanos: 48},
		{PID: 7, TID: 8, CPU: 0, Comm: "w", Stack: st, Count: 1, Nanos: 4},
		{PID: 7, TID: 8, CPU: 1, Comm: "w", Stack: st, Count: 2, Nanos: 3},
		{PID: 7, TID: 9, CPU: 0, Comm: "w", Stack: st, Count: 1, Nanos: 8},
	}
	if got := a.Samples(); !slices.EqualFunc(got, want, sameSample) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	k := SampleKey{PID: 1, TID: 2, CPU: 3, Comm: string([]byte("worker"))}
	id := a.InternStack(k.PID, st)
	a.AddStack(k, id, 1)
	if n := testing.AllocsPerRun(1000, func() { a.AddStack(k, id, 1) }); n != 0 {
		t.Errorf("AddStack of a known sample allocates %v times, want 0", n)
	}
}

func TestPprofLabels(t *testing.T) {
	a := newFixture().aggregateByThread()
	samples := a.Samples() // in the order of the profile's samples
	for _, c := range []struct {
		labels   []string
		num, str []string
	}{
		{nil, []string{LabelPID}, []string{LabelComm}},
		{[]string{}, nil, nil},
		{[]string{LabelTID, LabelCPU, LabelPID, LabelComm, LabelTID}, []string{LabelCPU, LabelPID, LabelTID}, []string{LabelComm}},
		{[]string{LabelCPU}, []string{LabelCPU}, nil},
	} {
		p, err := BuildPprof(a, Meta{Labels: c.labels})
		if err != nil {
			t.Fatalf("labels %q: %v", c.labels, err)
		}
		for i, s := range p.Sample {
			num := slices.Sorted(maps.Keys(s.NumLabel))
			str := slices.Sorted(maps.Keys(s.Label))
			wantStr := c.str
			if samples[i].Comm == "" {
				wantStr = nil // no comm label for an empty comm
			}
			if !slices.Equal(num, c.num) || !slices.Equal(str, wantStr) {
				t.Errorf("labels %q: sample %d has numeric labels %v and string labels %v, want %v and %v",
					c.labels, i, num, str, c.num, wantStr)
				break
			}
			want := map[string]int64{LabelPID: int64(samples[i].PID), LabelTID: int64(samples[i].TID), LabelCPU: int64(samples[i].CPU)}
			for k, v := range s.NumLabel {
				if len(v) != 1 || v[0] != want[k] || len(s.NumUnit[k]) != 0 {
					t.Errorf("sample %d: label %s = %v (unit %v), want [%d]", i, k, v, s.NumUnit[k], want[k])
				}
			}
		}
	}
	if _, err := BuildPprof(a, Meta{Labels: []string{"pid", "uid"}}); err == nil || !strings.Contains(err.Error(), `"uid"`) {
		t.Errorf("unknown label: error %v", err)
	}
}

// TestPprofLabelsShared: samples with the same labels share their label
// maps, and samples with different labels do not.
func TestPprofLabelsShared(t *testing.T) {
	a := newFixture().aggregateByThread()
	p, err := BuildPprof(a, Meta{Labels: []string{LabelPID, LabelComm}})
	if err != nil {
		t.Fatal(err)
	}
	type labels struct {
		pid  int64
		comm string
	}
	byLabels := map[labels]*profile.Sample{}
	shared := 0
	for i, s := range p.Sample {
		l := labels{s.NumLabel[LabelPID][0], strings.Join(s.Label[LabelComm], ",")}
		first, ok := byLabels[l]
		if !ok {
			byLabels[l] = s
			continue
		}
		if fmt.Sprintf("%p %p", first.Label, first.NumLabel) != fmt.Sprintf("%p %p", s.Label, s.NumLabel) {
			t.Errorf("sample %d: labels %+v in maps of their own", i, l)
		}
		shared++
	}
	seen := map[string]labels{}
	for l, s := range byLabels {
		ptr := fmt.Sprintf("%p", s.NumLabel)
		if other, ok := seen[ptr]; ok {
			t.Errorf("labels %+v and %+v share one map", l, other)
		}
		seen[ptr] = l
	}
	if shared == 0 {
		t.Fatal("the fixture has no two samples with the same labels: the test checks nothing")
	}
}

// TestGoToolPprofReports runs the reports people use most on a profile
// with every label. Local symbolization may only complain about the one
// binary whose frames are unnamed (libstripped.so): pprof must leave the
// named mappings alone.
func TestGoToolPprofReports(t *testing.T) {
	goBin := goTool(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "labels.pb.gz")
	var buf bytes.Buffer
	meta := fixtureMeta
	meta.Labels = []string{LabelPID, LabelTID, LabelComm, LabelCPU}
	if err := WritePprof(&buf, newFixture().aggregateByThread(), meta); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"-raw"}, []string{"PeriodType: cpu nanoseconds", "cpu:[1] pid:[100] tid:[101]", "comm:[worker;1]",
			"compute app.c:20", "Mappings"}},
		{[]string{"-traces"}, []string{"comm:  kworker/0:1", "tid:  43", "cpu:  1", "square (inline)", "ret_from_fork"}},
		{[]string{"-top"}, []string{"Type: cpu", "square (inline)", "vfs_write", "[libstripped.so]"}},
		{[]string{"-peek", "."}, []string{"| vfs_write", "|   ksys_write", "| __libc_start_call_main"}},
	} {
		cmd := exec.Command(goBin, append(append([]string{"tool", "pprof"}, c.args...), file)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "PPROF_BINARY_PATH="+dir, "PPROF_TMPDIR="+dir)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("go tool pprof %v: %v\n%s", c.args, err, stderr.String())
		}
		for _, w := range c.want {
			if !strings.Contains(stdout.String(), w) {
				t.Errorf("go tool pprof %v output lacks %q:\n%s", c.args, w, stdout.String())
			}
		}
		for line := range strings.Lines(stderr.String()) {
			if !strings.Contains(line, "libstripped.so") && !strings.HasPrefix(line, "Some binary filenames not available") &&
				!strings.HasPrefix(line, "Try setting PPROF_BINARY_PATH") {
				t.Errorf("go tool pprof %v warned: %q", c.args, line)
			}
		}
	}
}

// TestPprofLabelsParse checks that the labels survive a write and a parse.
func TestPprofLabelsParse(t *testing.T) {
	var buf bytes.Buffer
	meta := Meta{Labels: []string{LabelTID, LabelCPU}}
	if err := WritePprof(&buf, aggregateOf(Sample{PID: 1, TID: 2, CPU: 3, Count: 1, Nanos: 1}), meta); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if s := p.Sample[0]; s.NumLabel[LabelTID][0] != 2 || s.NumLabel[LabelCPU][0] != 3 || s.NumLabel[LabelPID] != nil {
		t.Errorf("labels %v", s.NumLabel)
	}
}

func TestCgroupLabel(t *testing.T) {
	st := &symbolize.Stack{Frames: []symbolize.Frame{{Address: 0x10, Function: "work"}}}
	a := NewAggregator()
	addSample(a, SampleKey{PID: 1, Comm: "a", Cgroup: "/system.slice/a.service"}, st, 5)
	addSample(a, SampleKey{PID: 1, Comm: "a", Cgroup: "/system.slice/b.service"}, st, 5)
	p, err := BuildPprof(a, Meta{Labels: []string{LabelComm, LabelCgroup}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range p.Sample {
		got = append(got, s.Label[LabelCgroup]...)
	}
	if len(got) != 2 || got[0] != "/system.slice/a.service" || got[1] != "/system.slice/b.service" {
		t.Errorf("cgroup labels %v", got)
	}
}
