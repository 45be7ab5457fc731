package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gprofile/gprofile/internal/testutil"
	"golang.org/x/sync/errgroup"
)

// TestPickSysmon: a thread is taken for sysmon only when its
// /proc/TID/syscall line shows it in nanosleep or in futex with a
// timeout.
func TestPickSysmon(t *testing.T) {
	for _, c := range []struct {
		line string
		want bool
	}{
		{"35 0x7f3243dfed88 0x0 0x0 0x0 0x0 0x0 0x7ffd1 0x46e1c3\n", true},
		{"202 0x1454160 0x80 0x0 0x2f2806e13ea0 0x0 0x0 0x7ffd1 0x46e1c3\n", true},
		{"202 0xf90f2041160 0x80 0x0 0x0 0x0 0x0 0x7ffd1 0x46e1c3\n", false}, // a parked M: no timeout
		{"281 0x6 0x2f28070676fc 0x80 0x2d 0x0 0x0 0x7ffd1 0x46e1c3\n", false},
		{"running\n", false},
		{"-1 0x7ffd1 0x46e1c3\n", false},
		{"", false},
		{"202 0x1454160 0x80 0x0 zz 0x0 0x0 0x1 0x2", false},
	} {
		if got := pickSysmon(c.line); got != c.want {
			t.Errorf("pickSysmon(%q) = %v, want %v", c.line, got, c.want)
		}
	}
}

// TestRelaxSysmon: the runtime's sysmon thread gets sysmonSlack, the
// main thread keeps its own, and a command started with startCommand,
// from whichever thread (some started by sysmon, with its slack), gets
// the main thread's.
func TestRelaxSysmon(t *testing.T) {
	testutil.RequirePrivileges(t)
	tid, err := secondThread()
	if err != nil {
		t.Fatal(err)
	}
	relaxSysmon() // startSlack now, sysmon's slack on a goroutine of its own
	slack := func(path string) int {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return n
	}
	sysmon := fmt.Sprintf("/proc/%d/timerslack_ns", tid)
	for end := time.Now().Add(2 * sysmonTries * time.Millisecond); slack(sysmon) != sysmonSlack && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	if got := slack(sysmon); got != sysmonSlack {
		t.Errorf("thread %d's timer slack = %d ns, want %d", tid, got, sysmonSlack)
	}
	main := slack("/proc/self/timerslack_ns")
	if main == sysmonSlack || main != startSlack {
		t.Errorf("the main thread's timer slack = %d ns, startSlack %d; want it left alone", main, startSlack)
	}
	var g errgroup.Group
	for range 32 { // on whichever threads the goroutines run
		g.Go(func() error {
			var out strings.Builder
			cmd := exec.Command("cat", "/proc/self/timerslack_ns")
			cmd.Stdout = &out
			if err := startCommand(cmd); err != nil {
				return err
			}
			if err := cmd.Wait(); err != nil {
				return err
			}
			if got, _ := strconv.Atoi(strings.TrimSpace(out.String())); got != main {
				return fmt.Errorf("a command's timer slack = %q ns, want the main thread's %d", out.String(), main)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}
