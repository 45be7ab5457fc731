package unwind

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gprofile/gprofile/internal/testutil"
)

// TestUnwindGoStack unwinds, offline, a goroutine's stack that
// testdata/gostack captured in its leaf: with the linker's .debug_frame
// and, linked with -w, with .gopclntab's SP deltas. Both give the whole
// chain from the leaf to the goroutine's entry and end as complete at
// runtime.goexit.
func TestUnwindGoStack(t *testing.T) {
	gotool := testutil.RequireTool(t, "go")
	for _, tc := range []struct{ name, ldflags string }{
		{"debug_frame", ""},
		{"gopclntab", "-w"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "gostack")
			cmd := exec.Command(gotool, "build", "-ldflags="+tc.ldflags, "-o", bin, ".")
			cmd.Dir = "testdata/gostack"
			cmd.Env = append(os.Environ(), "GO111MODULE=off")
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go build: %v\n%s", err, b)
			}
			out := filepath.Join(dir, "dump")
			if b, err := exec.Command(bin, out).CombinedOutput(); err != nil {
				t.Fatalf("gostack: %v\n%s", err, b)
			}
			d := readDump(t, out)
			u := New(Options{})
			if tab := u.Table(Object{Key: bin, Path: bin}); tab.Stats().FDEs < 1000 {
				t.Fatalf("table: %+v", tab.Stats())
			}
			fs, stop := unwindFrames(t, u, d, bin)
			var names []string
			for _, f := range fs {
				names = append(names, f.name)
			}
			want := slices.Concat([]string{"main.leaf"}, repeat("main.middle", 21), []string{"main.entry", "main.main.gowrap1", "runtime.goexit.abi0"}) // gowrap1: the go statement's closure
			// The leaf frame is in capture's ABI wrapper or in main.leaf itself.
			if len(names) > 0 && names[0] == "main.capture" {
				names = names[1:]
			}
			if !slices.Equal(names, want) || stop != StopComplete {
				t.Errorf("got %v, stop %v\nwant %v\n%s", names, stop, want, framesText(fs))
			}
		})
	}
}
