package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/gprofile/gprofile/internal/preflight"
)

const checkUsageText = `gprofile check: what this machine lacks for a complete profile, one line per item
(ok, note, or warn with the command that fixes it); with -p, each binary the
process maps too (frame pointers, CFI, symbols, debug info).
Exit status: 0 when a profile would be complete, 1 when not, 2 for bad usage.

Usage:
  gprofile check [-p PID[,PID...]]

Flags:
`

// checkMain runs "gprofile check" and exits.
func checkMain(args []string) {
	code, err := runCheck(args, os.Stdout, os.Stderr, preflight.DefaultHost())
	switch {
	case errors.Is(err, errHelp):
		os.Exit(0)
	case err != nil:
		fmt.Fprintf(os.Stderr, "gprofile check: %v\n", err)
		fmt.Fprintln(os.Stderr, "run 'gprofile check -h' for usage")
		os.Exit(2)
	}
	os.Exit(code)
}

// runCheck parses args, checks host (and the -p processes' binaries) and
// writes the items to stdout; it returns the exit status (0: a profile
// would be complete, 1: not), or a usage error.
func runCheck(args []string, stdout, stderr io.Writer, host preflight.Host) (int, error) {
	var pids []uint32
	fs := flag.NewFlagSet("gprofile check", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(&idsFlag{&pids, "pid"}, "p", "also check the binaries these `pids` map (comma-separated)")
	switch err := fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stderr, checkUsageText)
		printFlags(stderr, fs)
		return 0, errHelp
	case err != nil:
		return 0, err
	case fs.NArg() > 0:
		return 0, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	items := host.System()
	for _, pid := range pids {
		bins, err := host.Process(int(pid))
		if err != nil {
			return 0, fmt.Errorf("-p: pid %d: no such process", pid)
		}
		items = append(items, bins...)
	}
	if preflight.Write(stdout, items) {
		return 0, nil
	}
	return 1, nil
}
