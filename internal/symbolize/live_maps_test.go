package symbolize

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gprofile/gprofile/internal/symbolize/procmaps"

	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
	"github.com/gprofile/gprofile/internal/symbolize/objfile"
)

// runMapper builds testdata/mapper.c and runs it on file: count
// executable mappings of the executable PT_LOAD segment of file. It
// returns the process and the mappings' addresses; the process ends with
// the test.
func runMapper(t *testing.T, file string, count int) (*exec.Cmd, []uint64, elfSegment) {
	t.Helper()
	gcc := symtest.LookPath(t, "gcc", "builds testdata/mapper.c")
	mapper := filepath.Join(t.TempDir(), "mapper")
	if b, err := exec.Command(gcc, "-O2", "-o", mapper, "testdata/mapper.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc mapper.c: %v\n%s", err, b)
	}
	seg := symtest.ExecSegment(t, file)
	mask := objfile.PageSize - 1
	off := seg.Off &^ mask
	length := seg.Off + seg.Filesz - off
	cmd := exec.Command(mapper, file, strconv.FormatUint(off, 10), strconv.FormatUint(length, 10), strconv.Itoa(count))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	var addrs []uint64
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "ready" {
		a, err := strconv.ParseUint(sc.Text(), 16, 64)
		if err != nil {
			t.Fatalf("mapper said %q", sc.Text())
		}
		addrs = append(addrs, a)
	}
	go io.Copy(io.Discard, stdout)
	if len(addrs) != count {
		t.Fatalf("mapper mapped %d times, want %d", len(addrs), count)
	}
	return cmd, addrs, elfSegment{vaddr: seg.Vaddr &^ mask}
}

// elfSegment is the page-aligned ELF address of a mapped segment.
type elfSegment struct{ vaddr uint64 }

// TestLiveManyMappings: a process with 5,000 executable mappings of one
// file is read and symbolized in bounded time, each mapping named.
func TestLiveManyMappings(t *testing.T) {
	bin := symtest.BuildProg(t, true)
	const n = 5000
	cmd, addrs, seg := runMapper(t, bin, n)
	leaf := symtest.ElfSymbol(t, bin, "leaf")
	var ips []uint64
	for i := 0; i < n; i += 7 {
		ips = append(ips, addrs[i]+leaf.Value-seg.vaddr+4)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	s := liveSymbolizer(t)
	st := s.Stack(uint32(cmd.Process.Pid), nil, ips)
	d := time.Since(start)
	runtime.ReadMemStats(&after)
	for i, f := range st.Frames {
		if f.Function != "leaf" || f.Mapping == nil || f.Mapping.Path != bin {
			t.Fatalf("frame %d = %+v", i, f)
		}
	}
	t.Logf("%d mappings: %d frames in %v, %d KiB allocated", n, len(st.Frames), d, (after.TotalAlloc-before.TotalAlloc)>>10)
	if d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
		t.Errorf("allocated %d MiB", alloc>>20)
	}
}

// TestLiveStrangePath: a mapped file whose name holds spaces, a newline
// (which /proc/PID/maps shows as \012) and " (deleted)" — though the file
// is still there — is found and named, through the process's root (a
// fake procfs without map_files, as for a reader without CAP_SYS_ADMIN).
func TestLiveStrangePath(t *testing.T) {
	orig := symtest.BuildProg(t, true)
	name := filepath.Join(t.TempDir(), "a dir", "we ird\nname (deleted)")
	os.MkdirAll(filepath.Dir(name), 0o755)
	copyFile(t, orig, name)
	cmd, addrs, seg := runMapper(t, name, 1)
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err) // our own child's maps
	}
	shown := strings.ReplaceAll(strings.TrimSuffix(name, procmaps.DeletedSuffix), "\n", `\012`)
	if !strings.Contains(string(maps), shown+procmaps.DeletedSuffix+"\n") {
		t.Fatalf("maps does not show %q:\n%s", shown, maps)
	}
	leaf := symtest.ElfSymbol(t, orig, "leaf")
	ip := addrs[0] + leaf.Value - seg.vaddr + 4

	// The live process, as root or as its owner.
	s := liveSymbolizer(t)
	st := s.Stack(uint32(cmd.Process.Pid), nil, []uint64{ip})
	checkFrames(t, st.Frames, []wantFrame{{"leaf", ReasonNone, shown}})

	// A procfs with the process's maps and root only.
	const pid = 5
	fp := newFakeProc(t)
	fp.setMaps(pid)
	if err := os.WriteFile(filepath.Join(fp.root, "5", "maps"), maps, 0o644); err != nil {
		t.Fatal(err)
	}
	st = fp.symbolizer("testdata/kallsyms.txt").Stack(pid, nil, []uint64{ip})
	checkFrames(t, st.Frames, []wantFrame{{"leaf", ReasonNone, shown}})
}
