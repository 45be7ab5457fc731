package unwind

import (
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gprofile/gprofile/internal/testutil"
)

// TestUnwindGoStack unwinds, offline, a goroutine's stack that
// testdata/gostack captured in its leaf, built with DWARF and linked with
// -w. The table reads .gopclntab's SP deltas either way (their agreement
// with the linker's .debug_frame is TestGoPclntabMatchesDebugFrame's);
// both give the whole chain from the leaf to the goroutine's entry and
// end as complete at runtime.goexit.
func TestUnwindGoStack(t *testing.T) {
	for _, tc := range []struct{ name, ldflags string }{
		{"debug_frame", ""},
		{"gopclntab", "-w"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := testutil.BuildGo(t, "testdata/gostack", "-ldflags="+tc.ldflags)
			out := filepath.Join(t.TempDir(), "dump")
			if b, err := exec.Command(bin, out).CombinedOutput(); err != nil {
				t.Fatalf("gostack: %v\n%s", err, b)
			}
			d := readDump(t, out)
			u := New(Options{})
			if tab := u.Table(Object{Key: bin, Path: bin}); tab.Stats().GoFuncs < 1000 {
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
			checkExtent(t, u, d)
		})
	}
}
