package main

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/gprofile/gprofile/internal/testutil"
)

// startWorkload builds testdata/NAME.c and runs it for secs seconds.
func startWorkload(t *testing.T, name string, secs int) *exec.Cmd {
	t.Helper()
	bin := testutil.BuildC(t, "testdata/"+name+".c", "-O2", "-g", "-fno-omit-frame-pointer")
	cmd := exec.Command(bin, strconv.Itoa(secs))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// TestSchedSwitch samples every sched:sched_switch of a workload that
// sleeps in a loop: stacks end in the kernel's scheduling path with the
// workload's user frames under it.
func TestSchedSwitch(t *testing.T) {
	testutil.RequirePrivileges(t)
	cmd := startWorkload(t, "sleeper", 20)
	out, _, code := runGprofile(t, "-E", "-e", "sched:sched_switch", "-d", "1", "-p", strconv.Itoa(cmd.Process.Pid))
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	// libc's clock_nanosleep keeps no frame pointer, so frame-pointer
	// unwinding skips its caller sleeper_nap (perf shows the same).
	with, total := samplesWith(t, out, "main", "sleeper_loop")
	sched := 0
	for _, l := range parseFolded(t, out) {
		last := l.frames[len(l.frames)-1]
		if strings.HasSuffix(last, "_[k]") && strings.Contains(strings.Join(l.frames, ";"), "schedule") {
			sched += l.count
		}
	}
	// ~1000 sleeps a second; timer slack and scheduling make it fewer.
	if total < 300 || with*10 < total*9 || sched*10 < total*9 {
		t.Errorf("%d switches, %d with the user chain, %d in schedule():\n%s", total, with, sched, out)
	}
}

// TestPageFaults samples page faults of a workload that touches new
// memory; the pprof sample type follows the event.
func TestPageFaults(t *testing.T) {
	testutil.RequirePrivileges(t)
	cmd := startWorkload(t, "faulter", 20)
	path := t.TempDir() + "/faults.pb.gz"
	_, _, code := runGprofile(t, "-e", "page-faults", "-c", "1", "-d", "1", "-p", strconv.Itoa(cmd.Process.Pid), "-o", path)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	p := parseProfile(t, path)
	if len(p.SampleType) == 0 || p.SampleType[len(p.SampleType)-1].Type != "page-faults" {
		t.Errorf("sample types %v, want page-faults last", p.SampleType)
	}
	in, total := int64(0), int64(0)
	for _, s := range p.Sample {
		total += s.Value[0]
		for _, loc := range s.Location {
			for _, ln := range loc.Line {
				if ln.Function.Name == "faulter_touch" {
					in += s.Value[0]
				}
			}
		}
	}
	if total < 1000 || in*10 < total*9 {
		t.Errorf("%d page faults sampled, %d in faulter_touch", total, in)
	}
}

func parseProfile(t *testing.T, path string) *profile.Profile {
	t.Helper()
	// pprof reports problems on stderr; stdout holds the profile, whose
	// function names may contain "Error" (a whole-system profile sees
	// whatever else runs).
	var stderr bytes.Buffer
	cmd := exec.Command("go", "tool", "pprof", "-raw", path)
	cmd.Stderr = &stderr
	if _, err := cmd.Output(); err != nil || bytes.Contains(stderr.Bytes(), []byte("Error")) {
		t.Errorf("go tool pprof -raw: %v\n%s", err, stderr.Bytes())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := profile.ParseData(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
