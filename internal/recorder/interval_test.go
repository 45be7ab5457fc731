package recorder

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/output"
	"github.com/gprofile/gprofile/internal/symbolize"
)

// swapSource delivers its samples; a nil PID entry asks the recorder for
// a swap (as its ticker does) and gives the reader an idle moment.
type swapSource struct {
	samples []attach.Sample
	rec     **Recorder
}

func (f swapSource) RunIdle(ctx context.Context, fn func(*attach.Sample), idle func()) error {
	for i := range f.samples {
		if f.samples[i].PID == 0 {
			(*f.rec).swapDue.Store(true)
			idle()
			continue
		}
		s := f.samples[i]
		fn(&s)
	}
	return nil
}

// TestIntervals: a continuous run hands over every sample in exactly one
// interval, in order, the partial last one included; a stack seen in an
// earlier interval is interned anew in the later one (the memo goes with
// its aggregate), so every interval makes a valid pprof of its own.
func TestIntervals(t *testing.T) {
	root := t.TempDir()
	for _, pid := range []string{"7", "9"} {
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "maps"), []byte("00400000-00401000 r-xp 00000000 00:00 0 \n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := func(pid uint32, ip uint64) attach.Sample {
		return attach.Sample{PID: pid, TID: pid, TimeNs: 1, Period: 10, Comm: []byte("w"), UserIPs: []uint64{ip, 0x400100}}
	}
	swap := attach.Sample{}
	exit := attach.Sample{PID: 9, TID: 9, TimeNs: 2, Flags: attach.FlagProcessExit}
	in := []attach.Sample{
		s(7, 0x400010), s(7, 0x400010), s(9, 0x400020), swap,
		s(7, 0x400010), exit, s(7, 0x400030), swap, swap,
		s(9, 0x400020), s(7, 0x400010), s(7, 0x400020), s(7, 0x400010),
	}
	want := []uint64{3, 2, 0, 4}
	var rec *Recorder
	var got []Interval
	rec, err := New(Config{Source: swapSource{in, &rec}, Symbolize: symbolize.Options{ProcRoot: root, KallsymsPath: os.DevNull},
		Interval: time.Hour, OnInterval: func(iv Interval) { got = append(got, iv) }})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	res, err := rec.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Aggregate != nil || res.Samples != 9 {
		t.Errorf("result: aggregate %v, %d samples; want nil (handed over), 9", res.Aggregate, res.Samples)
	}
	if len(got) != len(want) {
		t.Fatalf("%d intervals, want %d", len(got), len(want))
	}
	var sum int64
	for i, iv := range got {
		n, ns := iv.Aggregate.Total()
		if iv.Samples != want[i] || n != int64(want[i]) || ns != 10*n || iv.Last != (i == len(got)-1) {
			t.Errorf("interval %d: %d samples, aggregate %d (%d ns), last %v; want %d", i, iv.Samples, n, ns, iv.Last, want[i])
		}
		if i > 0 && !iv.Start.Equal(got[i-1].Start.Add(got[i-1].Duration)) {
			t.Errorf("interval %d starts at %v, not where interval %d ended", i, iv.Start, i-1)
		}
		p, err := output.BuildPprof(iv.Aggregate, output.Meta{Start: iv.Start, Duration: iv.Duration})
		if err != nil {
			t.Fatalf("interval %d: %v", i, err)
		}
		if err := p.CheckValid(); err != nil {
			t.Errorf("interval %d: %v", i, err)
		}
		for _, ps := range p.Sample {
			sum += ps.Value[0]
			if len(ps.Location) != 2 || ps.Location[0].Address < 0x400010 || ps.Location[0].Address > 0x400030 {
				t.Errorf("interval %d: sample of %d locations at %#x, want 2 from 0x400010-0x400030", i, len(ps.Location), ps.Location[0].Address)
			}
		}
	}
	if sum != 9 {
		t.Errorf("the intervals' pprofs hold %d samples, want 9", sum)
	}
}

// TestIntervalNeedsCallback: Interval without OnInterval is refused.
func TestIntervalNeedsCallback(t *testing.T) {
	if _, err := New(Config{Source: fakeSource{}, Symbolize: symbolize.Options{ProcRoot: t.TempDir(), KallsymsPath: os.DevNull}, Interval: time.Second}); err == nil {
		t.Error("New took Interval without OnInterval")
	}
}
