package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// sysmonSlack is the timer slack, in ns, given to the Go runtime's sysmon
// thread. While any goroutine runs, sysmon wakes every 20 µs (doubling
// only after 1 ms of wake-ups) to retake Ps from system calls and
// preempt long runs; each wake-up is a nanosleep and two context
// switches, which a profiler that works in short bursts (a ring buffer
// drained when the BPF program wakes the reader, or at its poll) pays
// for hundreds of times a second. With 1 ms
// of slack the kernel may coalesce those wake-ups to about one a
// millisecond: sysmon's duties (preemption after 10 ms, a P retaken
// from a blocking system call) come up to 1 ms later. BENCHMARKS.md
// (issue 16, session 19) has what it saved; bench/run.sh measures it.
const sysmonSlack = 1_000_000

// relaxSysmon records the main thread's timer slack (startSlack, which
// startCommand gives commands) and then, on a goroutine of its own, gives
// the Go runtime's sysmon thread sysmonSlack (slackSysmon), trying again
// every millisecond, up to sysmonTries times, while sysmon is found
// running rather than asleep. It never fails: the slack is an
// optimisation; when the main thread's slack does not read, it changes
// nothing.
func relaxSysmon() {
	b, err := os.ReadFile("/proc/self/timerslack_ns") // the main thread's
	if err != nil {
		return
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 {
		return // without startSlack, commands could not get it back
	}
	startSlack = n
	go func() {
		for range sysmonTries {
			_, err := slackSysmon()
			if !errors.Is(err, errSysmonAwake) {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
}

// sysmonTries bounds relaxSysmon's attempts.
const sysmonTries = 100

// errSysmonAwake is slackSysmon's error when the thread it takes for
// sysmon is not asleep where sysmon sleeps: most often sysmon caught
// running between two sleeps, which a later try gets past.
var errSysmonAwake = errors.New("not asleep where sysmon sleeps")

// slackSysmon sets the timer slack of the Go runtime's sysmon thread to
// sysmonSlack by writing /proc/TID/timerslack_ns (Linux 4.6 and later;
// another thread's needs CAP_SYS_NICE). sysmon is the first thread the
// runtime starts after the main thread (runtime.main, before any
// package init), so it comes second in /proc/self/task, which lists
// threads in the order they were created; it is taken only if
// /proc/self/task/TID/syscall shows it asleep where sysmon sleeps
// (pickSysmon; errSysmonAwake otherwise). Only that thread is changed,
// but the threads sysmon starts (an M for a P it hands off) inherit its
// slack, and a command inherits the slack of the thread that forks it:
// start commands with startCommand. It reports the thread changed.
func slackSysmon() (int, error) {
	tid, err := secondThread()
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/syscall", tid))
	if err != nil {
		return 0, err
	}
	if !pickSysmon(string(b)) {
		return 0, fmt.Errorf("thread %d: %w (%s)", tid, errSysmonAwake, strings.TrimSpace(string(b)))
	}
	path := fmt.Sprintf("/proc/%d/timerslack_ns", tid)
	if err := os.WriteFile(path, []byte(strconv.Itoa(sysmonSlack)), 0); err != nil {
		return 0, err
	}
	return tid, nil
}

// secondThread returns the ID of the second thread in /proc/self/task,
// which lists threads in the order they were created (the thread
// group's list; thread IDs wrap at pid_max, so their order may not be):
// the first thread the runtime started after the main thread.
func secondThread() (int, error) {
	d, err := os.Open("/proc/self/task")
	if err != nil {
		return 0, err
	}
	names, err := d.Readdirnames(-1) // unsorted
	d.Close()
	if err != nil {
		return 0, err
	}
	pid := os.Getpid()
	var tids []int
	for _, name := range names {
		if tid, err := strconv.Atoi(name); err == nil && tid != pid {
			tids = append(tids, tid)
		}
	}
	if len(tids) == 0 {
		return 0, fmt.Errorf("no thread but the main one in /proc/self/task")
	}
	return tids[0], nil
}

// startSlack is the main thread's timer slack, in ns, as relaxSysmon
// read it (0 before, or when it could not read it): what the commands
// gprofile starts get. Set before any command starts, then only read.
var startSlack int

// startCommand starts cmd (exec.Cmd.Start) from a thread whose timer
// slack is startSlack, so that the command inherits gprofile's slack
// (as both its slack and its default) rather than that of whichever
// thread Go forks it on, which may be one that sysmon started with
// sysmonSlack.
func startCommand(cmd *exec.Cmd) error {
	if startSlack > 0 {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		// On failure the thread keeps its slack and the command too.
		unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(startSlack), 0, 0, 0)
	}
	return cmd.Start()
}

// pickSysmon reports whether a thread's /proc/TID/syscall line ("NR
// ARG1 ... ARG6 SP PC", in hex after NR) shows it where sysmon sleeps:
// in nanosleep, or in futex with a timeout (the fourth argument).
func pickSysmon(syscall string) bool {
	f := strings.Fields(syscall)
	if len(f) < 5 {
		return false
	}
	nr, err := strconv.Atoi(f[0])
	if err != nil {
		return false
	}
	switch nr {
	case unix.SYS_NANOSLEEP: // runtime.usleep
		return true
	case unix.SYS_FUTEX: // notetsleep, until the next timer
		timeout, err := strconv.ParseUint(strings.TrimPrefix(f[4], "0x"), 16, 64)
		return err == nil && timeout != 0
	}
	return false
}
