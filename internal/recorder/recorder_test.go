package recorder

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/output"
	"github.com/gprofile/gprofile/internal/symbolize"
)

// fakeSource delivers its samples, calling idle after every second one.
type fakeSource []attach.Sample

func (f fakeSource) RunIdle(ctx context.Context, fn func(*attach.Sample), idle func()) error {
	for i := range f {
		s := f[i] // fn may not keep it: hand over a copy that changes after
		fn(&s)
		s.UserIPs[0] = 0xdead
		if i%2 == 1 {
			idle()
		}
	}
	return nil
}

// streamSink records what a per-sample writer gets.
type streamSink struct {
	pids   []uint32
	frames int
	err    error
}

func (s *streamSink) Add(r *output.Record) error {
	s.pids = append(s.pids, r.Meta.PID)
	if r.Frames != nil {
		s.frames += len(r.Frames.Frames)
	}
	return s.err
}

// TestRunSource runs the whole pipeline (reader, worker, memo,
// aggregate, stream) over samples of a made-up process: the result counts
// every sample but the exit record, the stream sees each one with its
// frames, and AfterSampling runs once.
func TestRunSource(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "7"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "7", "maps"), []byte("00400000-00401000 r-xp 00000000 00:00 0 \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sample := func(tid uint32, ip uint64, flags uint32) attach.Sample {
		return attach.Sample{PID: 7, TID: tid, TimeNs: 1, Period: 10, Flags: flags, Comm: []byte("w"), UserIPs: []uint64{ip}}
	}
	src := fakeSource{sample(7, 0x400010, 0), sample(8, 0x400010, 0), sample(7, 0x400020, 0), sample(7, 0x400010, attach.FlagProcessExit)}
	stream := &streamSink{}
	after := 0
	rec, err := New(Config{Source: src, Symbolize: symbolize.Options{ProcRoot: root, KallsymsPath: os.DevNull},
		Labels: []string{output.LabelTID}, Stream: stream, AfterSampling: func() { after++ }})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	res, err := rec.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Samples != 3 || rec.Samples() != 3 || after != 1 || res.StreamErr != nil {
		t.Errorf("samples %d (read %d), AfterSampling %d times, stream error %v; want 3, 3, 1, nil", res.Samples, rec.Samples(), after, res.StreamErr)
	}
	if n, ns := res.Aggregate.Total(); n != 3 || ns != 30 || res.Aggregate.Len() != 3 {
		t.Errorf("aggregate: %d samples, %d ns, %d entries; want 3, 30, 3 (by tid and stack)", n, ns, res.Aggregate.Len())
	}
	if len(stream.pids) != 3 || stream.frames != 3 {
		t.Errorf("stream got %d samples with %d frames, want 3 with 3", len(stream.pids), stream.frames)
	}
	if res.Counters != (attach.Counters{}) || res.CPUs != nil {
		t.Errorf("a Source has no sampler, yet counters %+v, cpus %v", res.Counters, res.CPUs)
	}
}

// TestRunStreamError: the stream's first error stops the stream, not the
// recording.
func TestRunStreamError(t *testing.T) {
	src := fakeSource{
		{PID: 7, TID: 7, Period: 1, Comm: []byte("w"), UserIPs: []uint64{0x10}},
		{PID: 7, TID: 7, Period: 1, Comm: []byte("w"), UserIPs: []uint64{0x20}},
	}
	disk := errors.New("disk full")
	stream := &streamSink{err: disk}
	rec, err := New(Config{Source: src, Symbolize: symbolize.Options{ProcRoot: t.TempDir(), KallsymsPath: os.DevNull}, Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	res, err := rec.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res.StreamErr, disk) || len(stream.pids) != 1 || res.Samples != 2 {
		t.Errorf("stream error %v after %d samples, %d recorded; want %v after 1, 2", res.StreamErr, len(stream.pids), res.Samples, disk)
	}
}
