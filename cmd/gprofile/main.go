// Command gprofile is a whole-system CPU stack profiler: a BPF perf_event
// program samples every CPU, and gprofile symbolizes the kernel and user
// stacks and writes a pprof profile or folded stacks.
//
//	sudo gprofile -f 99 -d 10              # whole system, 10 s, gprofile.pb.gz
//	sudo gprofile -p 1234 -E > folded.txt  # one process, folded stacks
//	go tool pprof -top gprofile.pb.gz
//
// Exit status: 0 on success, 1 when profiling failed, 2 for bad usage;
// with -- CMD, the command's own status (127 when it does not exist).
package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
)

func main() {
	if os.Getenv(childEnv) == "1" {
		runChildMode(os.Args[1:])
	}
	relaxSysmon()
	if len(os.Args) > 1 && os.Args[1] == "view" {
		viewMain(os.Args[2:])
	}
	if len(os.Args) > 1 && os.Args[1] == "check" {
		checkMain(os.Args[2:])
	}
	if len(os.Args) > 1 && os.Args[1] == "stat" {
		statMain(os.Args[2:])
	}
	startGCTuning() // until gprofile exits
	// A write to a closed pipe returns EPIPE instead of killing gprofile
	// (Go's default for stdout), so that it can stop and say so, the same
	// for every format; the command of -- CMD gets the default back at
	// its exec.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	opts, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, errHelp) || errors.Is(err, errVersion) {
		os.Exit(0)
	}
	if err != nil {
		usageExit(err)
	}
	stopDev := startDevProfiles()
	code, err := run(opts)
	stopDev()
	var nf *errNotFound
	if errors.As(err, &nf) {
		fmt.Fprintf(os.Stderr, "gprofile: %v\n", err)
		os.Exit(127)
	}
	if errors.As(err, new(usageError)) {
		usageExit(err)
	}
	if errors.Is(err, errInterrupted) {
		fmt.Fprintf(os.Stderr, "gprofile: %v\n", err)
		os.Exit(130)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gprofile: %v\n", err)
		os.Exit(1)
	}
	os.Exit(code)
}

// usageExit prints a usage error in one line, with a pointer to -h, and
// exits 2.
func usageExit(err error) {
	fmt.Fprintf(os.Stderr, "gprofile: %v\n", err)
	fmt.Fprintln(os.Stderr, "run 'gprofile -h' for usage")
	os.Exit(2)
}

// versionLine is what --version prints: the module version, the commit
// and its time (from the build's VCS stamp, with "+dirty" for a modified
// tree) and the Go version.
func versionLine() string {
	v, rev, when, dirty := "(devel)", "", "", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		v = bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "+dirty"
				}
			}
		}
	}
	line := "gprofile " + v
	if rev != "" {
		line += fmt.Sprintf(" (commit %.12s%s, %s)", rev, dirty, when)
	}
	return line + ", " + runtime.Version()
}

// viewMain runs "gprofile view" and exits.
func viewMain(args []string) {
	err := runView(args)
	switch {
	case err == nil, errors.Is(err, errHelp):
		os.Exit(0)
	case errors.Is(err, errViewUsage):
		fmt.Fprintf(os.Stderr, "gprofile view: %v\n", err)
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "gprofile view: %v\n", err)
		os.Exit(1)
	}
}
