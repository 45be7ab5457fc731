package output

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites the file with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the output (run go test -update to accept it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

func TestWriteFoldedGolden(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteFolded(&buf, newFixture().aggregate()); err != nil {
		t.Fatal(err)
	}
	golden(t, "fixture.folded", buf.Bytes())
}

// TestWriteFoldedOrder checks that the order of the samples does not
// matter, and that equal lines are summed.
func TestWriteFoldedOrder(t *testing.T) {
	fx := newFixture()
	var fwd, rev bytes.Buffer
	if err := WriteFolded(&fwd, fx.aggregate()); err != nil {
		t.Fatal(err)
	}
	reversed := NewAggregator()
	samples := fx.samples()
	for i := range samples {
		s := samples[len(samples)-1-i]
		addSample(reversed, SampleKey{PID: s.meta.PID, Comm: s.meta.Comm}, s.stack, fixturePeriod)
	}
	if err := WriteFolded(&rev, reversed); err != nil {
		t.Fatal(err)
	}
	if fwd.String() != rev.String() {
		t.Errorf("output depends on sample order:\n%s\nvs\n%s", fwd.String(), rev.String())
	}
	// pid 100 and pid 101 "app" fold to the same write stack: 3 + 2.
	const line = "app;__libc_start_call_main;main;write;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];ksys_write_[k];vfs_write_[k] 5\n"
	if !bytes.Contains(fwd.Bytes(), []byte(line)) {
		t.Errorf("missing summed line %q in\n%s", line, fwd.String())
	}
}

func TestWriteFoldedEdgeCases(t *testing.T) {
	var buf bytes.Buffer
	samples := aggregateOf(
		Sample{PID: 1, Comm: "empty", Stack: nil, Count: 2},
		Sample{PID: 1, Comm: "zero", Stack: &symbolize.Stack{}, Count: 0}, // adds nothing
		Sample{PID: 2, Comm: "tab\there", Stack: &symbolize.Stack{}, Count: 1},
	)
	if err := WriteFolded(&buf, samples); err != nil {
		t.Fatal(err)
	}
	if got, want := buf.String(), "empty 2\ntab?here 1\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

type failWriter struct{ err error }

func (w failWriter) Write([]byte) (int, error) { return 0, w.err }

func TestWriteFoldedError(t *testing.T) {
	errDisk := errors.New("disk full")
	err := WriteFolded(failWriter{errDisk}, newFixture().aggregate())
	if !errors.Is(err, errDisk) {
		t.Errorf("got error %v, want one wrapping %v", err, errDisk)
	}
}

func TestFoldedName(t *testing.T) {
	kernel := &symbolize.Mapping{Start: 0xffffffff81000000, Limit: 0xffffffff83000000, Path: KernelFile, Kernel: true}
	lib := newMapping("/usr/lib/libz.so.1", "", 0x7f0000002000, 0x1000, 0x2000, 7)
	vdso := newMapping("[vdso]", "", 0x7ffd00000000, 0x2000, 0, 0)
	anon := newMapping("", "", 0x7f3000000000, 0x1000, 0, 0)
	for _, c := range []struct {
		frame symbolize.Frame
		want  string
	}{
		{symbolize.Frame{Function: "main.main"}, "main.main"},
		{symbolize.Frame{Function: "std::vector<int>::push_back(int const&)"}, "std::vector<int>::push_back"},
		{symbolize.Frame{Function: "a;b\nc\r\x7fd\u2028e\xfff"}, "a:b?c??d?e?f"},
		{symbolize.Frame{Function: "héllo_世界"}, "héllo_世界"},
		{symbolize.Frame{Function: "schedule", Kernel: true, Mapping: kernel}, "schedule_[k]"},
		{symbolize.Frame{Function: "schedule", Mapping: kernel}, "schedule_[k]"},
		{symbolize.Frame{Address: 0xffffffff81000010, Kernel: true, Mapping: kernel}, "[unknown]_[k]"},
		{symbolize.Frame{Address: 0xffffffff81000010, Kernel: true}, "[unknown]_[k]"},
		{symbolize.Frame{Address: at(lib, 0x2abc), Mapping: lib}, "[libz.so.1+0x2abc]"},
		{symbolize.Frame{Address: at(vdso, 0x9d0), Mapping: vdso}, "[vdso+0x9d0]"},
		{symbolize.Frame{Address: 0x7f3000000010, Mapping: anon}, "[unknown]"},
		{symbolize.Frame{Address: 0x1234}, "[unknown]"},
	} {
		if got := FoldedName(&c.frame); got != c.want {
			t.Errorf("FoldedName(%+v) = %q, want %q", c.frame, got, c.want)
		}
	}
}

func TestFoldedPerPIDAndThread(t *testing.T) {
	st := &symbolize.Stack{Frames: []symbolize.Frame{{Address: 0x10, Function: "work"}}}
	a := NewAggregator()
	addSample(a, SampleKey{PID: 7, TID: 8, Comm: "app"}, st, 1)
	addSample(a, SampleKey{PID: 7, TID: 9, Comm: "app"}, st, 1)
	addSample(a, SampleKey{PID: 10, TID: 10, Comm: "app"}, st, 1)
	for _, c := range []struct {
		opts FoldedOptions
		want string
	}{
		{FoldedOptions{}, "app;work 3\n"},
		{FoldedOptions{PerPID: true}, "app-10;work 1\napp-7;work 2\n"},
		{FoldedOptions{PerThread: true}, "app-10/10;work 1\napp-7/8;work 1\napp-7/9;work 1\n"},
	} {
		var b strings.Builder
		if err := WriteFoldedOptions(&b, a, c.opts); err != nil {
			t.Fatal(err)
		}
		if b.String() != c.want {
			t.Errorf("%+v: got\n%s\nwant\n%s", c.opts, b.String(), c.want)
		}
	}
}

func TestFoldedFullNames(t *testing.T) {
	st := &symbolize.Stack{Frames: []symbolize.Frame{{Address: 0x10, Function: "ns::f(int, char const*)"}}}
	a := NewAggregator()
	add(a, 1, "app", st, 1)
	for _, c := range []struct {
		full bool
		want string
	}{{false, "app;ns::f 1\n"}, {true, "app;ns::f(int, char const*) 1\n"}} {
		var b strings.Builder
		if err := WriteFoldedOptions(&b, a, FoldedOptions{FullNames: c.full}); err != nil {
			t.Fatal(err)
		}
		if b.String() != c.want {
			t.Errorf("FullNames %v: %q, want %q", c.full, b.String(), c.want)
		}
	}
}
