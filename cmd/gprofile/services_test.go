package main

import (
	"fmt"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/gprofile/gprofile/internal/output"
)

// machineProfile makes a whole-machine interval's pprof as BuildPprof
// would, shaped like the ones this VM gives at 99 Hz in 10 s (a few
// hundred distinct samples, ~15 deep, thousands of locations): services
// services, each its own executable and cgroup, all sharing libc and
// the kernel; perService samples each, of different pids.
func machineProfile(services, perService int) *profile.Profile {
	p := &profile.Profile{
		SampleType:        []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		DefaultSampleType: "cpu",
		PeriodType:        &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:            10101010,
		TimeNanos:         1e18,
		DurationNanos:     10e9,
		Comments:          []string{"interval: test"},
	}
	lib := func(file string, nfunc, nloc int) []*profile.Location {
		m := &profile.Mapping{ID: uint64(len(p.Mapping) + 1), File: file, Start: 0x1000, Limit: 0x1000000, BuildID: fmt.Sprintf("%040x", len(p.Mapping)), HasFunctions: true}
		p.Mapping = append(p.Mapping, m)
		var fns []*profile.Function
		for i := range nfunc {
			f := &profile.Function{ID: uint64(len(p.Function) + 1), Name: fmt.Sprintf("%s_func_%d", file, i), SystemName: fmt.Sprintf("%s_func_%d", file, i), Filename: file + ".c"}
			p.Function = append(p.Function, f)
			fns = append(fns, f)
		}
		var locs []*profile.Location
		for i := range nloc {
			l := &profile.Location{ID: uint64(len(p.Location) + 1), Mapping: m, Address: 0x1000 + uint64(i)*16,
				Line: []profile.Line{{Function: fns[i%nfunc], Line: int64(i)}}}
			p.Location = append(p.Location, l)
			locs = append(locs, l)
		}
		return locs
	}
	kernel := lib("[kernel.kallsyms]", 600, 1200)
	libc := lib("/usr/lib/x86_64-linux-gnu/libc.so.6", 150, 400)
	for s := range services {
		exe := lib(fmt.Sprintf("/usr/bin/svc%d", s), 60, 120)
		cg := fmt.Sprintf("/system.slice/svc%d.service", s)
		for i := range perService {
			var stack []*profile.Location
			for d := range 6 {
				stack = append(stack, kernel[(s*131+i*17+d*7)%len(kernel)])
			}
			for d := range 3 {
				stack = append(stack, libc[(i*13+d*5)%len(libc)])
			}
			for d := range 6 {
				stack = append(stack, exe[(i*7+d*3)%len(exe)])
			}
			p.Sample = append(p.Sample, &profile.Sample{
				Location: stack,
				Value:    []int64{int64(1 + i%3), int64(1+i%3) * p.Period},
				Label:    map[string][]string{output.LabelComm: {fmt.Sprintf("svc%d", s)}, output.LabelCgroup: {cg}},
				NumLabel: map[string][]int64{output.LabelPID: {int64(1000 + s*10 + i%4)}},
			})
		}
	}
	return p
}

// BenchmarkServiceProfiles measures an interval's work past BuildPprof
// in a continuous run: split a whole-machine pprof by service and gzip
// each part, as onInterval does before queueing them.
func BenchmarkServiceProfiles(b *testing.B) {
	p := machineProfile(15, 40)
	n := newServiceNamer("")
	var gz gzipEncoder
	b.ReportAllocs()
	for b.Loop() {
		for _, part := range splitServices(p, n) {
			if _, err := gz.encode(part.Profile); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// TestSplitServices splits a profile of three services by cgroup, gzips
// the parts with one encoder in turn, and parses them back: each holds
// its service's samples with their values and stacks, only the
// locations, functions and mappings they use, its own executable first;
// the samples sum to the whole's. One service gives back the profile
// itself.
func TestSplitServices(t *testing.T) {
	p := machineProfile(3, 20)
	parts := splitServices(p, newServiceNamer(""))
	if len(parts) != 3 {
		t.Fatalf("%d parts, want 3", len(parts))
	}
	var gz gzipEncoder
	var sum int64
	for i, part := range parts {
		want := fmt.Sprintf("svc%d", i)
		if part.Key != want {
			t.Fatalf("part %d is %q, want %q (sorted)", i, part.Key, want)
		}
		if err := part.Profile.CheckValid(); err != nil {
			t.Fatalf("%s: %v", want, err)
		}
		data, err := gz.encode(part.Profile)
		if err != nil {
			t.Fatal(err)
		}
		q, err := profile.ParseData(data)
		if err != nil {
			t.Fatalf("%s: %v", want, err)
		}
		if len(q.Sample) != 20 || q.Period != p.Period || q.TimeNanos != p.TimeNanos || len(q.Comments) != 1 {
			t.Errorf("%s: %d samples, period %d, time %d, comments %q; want 20, the whole's", want, len(q.Sample), q.Period, q.TimeNanos, q.Comments)
		}
		if q.Mapping[0].File != "/usr/bin/"+want || len(q.Mapping) != 3 {
			t.Errorf("%s: mappings %v, want its executable first, then the kernel and libc", want, q.Mapping)
		}
		used := map[uint64]bool{}
		for j, s := range q.Sample {
			o := part.Profile.Sample[j]
			if s.Label[output.LabelCgroup][0] != "/system.slice/"+want+".service" || s.Value[0] != o.Value[0] || len(s.Location) != len(o.Location) {
				t.Fatalf("%s: sample %d is %v, want %v", want, j, s, o)
			}
			for k, l := range s.Location {
				used[l.ID] = true
				if l.Line[0].Function.Name != o.Location[k].Line[0].Function.Name {
					t.Fatalf("%s: sample %d frame %d is %s, want %s", want, j, k, l.Line[0].Function.Name, o.Location[k].Line[0].Function.Name)
				}
			}
			sum += s.Value[0]
		}
		if len(used) != len(q.Location) {
			t.Errorf("%s: %d locations, %d of them used", want, len(q.Location), len(used))
		}
	}
	var total int64
	for _, s := range p.Sample {
		total += s.Value[0]
	}
	if sum != total {
		t.Errorf("the parts hold %d samples, the whole %d", sum, total)
	}
	one := splitServices(machineProfile(1, 5), newServiceNamer(""))
	if len(one) != 1 || one[0].Key != "svc0" || len(one[0].Profile.Location) != 1200+400+120 {
		t.Errorf("one service: %d parts, want the profile itself", len(one))
	}
}
