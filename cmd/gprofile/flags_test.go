package main

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/testutil"
)

func TestParseFlags(t *testing.T) {
	for _, c := range []struct {
		argv   []string
		check  func(*options) bool
		errSub string
	}{
		{nil, func(o *options) bool {
			return o.freqHz == 99 && o.duration == 0 && o.output == "gprofile.pb.gz" && !o.folded
		}, ""},
		{[]string{"-E"}, func(o *options) bool { return o.folded && o.output == "-" }, ""},
		{[]string{"-E", "-o", "x.txt"}, func(o *options) bool { return o.folded && o.output == "x.txt" }, ""},
		{[]string{"-o", "x.folded"}, func(o *options) bool { return o.folded }, ""},
		{[]string{"-d", "10"}, func(o *options) bool { return o.duration == 10*time.Second }, ""},
		{[]string{"-d", "1.5"}, func(o *options) bool { return o.duration == 1500*time.Millisecond }, ""},
		{[]string{"-d", "1m30s"}, func(o *options) bool { return o.duration == 90*time.Second }, ""},
		{[]string{"-p", "1,2", "-p", "3"}, func(o *options) bool { return slices.Equal(o.pids, []uint32{1, 2, 3}) }, ""},
		{[]string{"--sw-event", "--idle", "-v", "-f", "999"}, func(o *options) bool { return o.swEvent && o.idle && o.verbose && o.freqHz == 999 }, ""},
		{nil, func(o *options) bool { return o.callGraph.mode == attach.CallGraphDWARF && o.callGraph.window == 0 }, ""},
		{[]string{"--call-graph", "dwarf"}, func(o *options) bool { return o.callGraph.mode == attach.CallGraphDWARF && o.callGraph.window == 0 }, ""},
		{[]string{"--call-graph", "dwarf,16380"}, func(o *options) bool { return o.callGraph.window == 16384 }, ""},
		{[]string{"--call-graph=fp"}, func(o *options) bool { return o.callGraph.mode == attach.CallGraphFP }, ""},
		{[]string{"--call-graph", "lbr"}, nil, "want fp or dwarf"},
		{[]string{"--call-graph", "fp,8192"}, nil, "only dwarf"},
		{[]string{"--call-graph", "dwarf,1000000"}, nil, "want bytes from 8"},
		{[]string{"-d", "0"}, nil, "positive"},
		{[]string{"-d", "-3"}, nil, "positive"},
		{[]string{"-p", "0"}, nil, "bad pid"},
		{[]string{"-p", "1,x"}, nil, "bad pid"},
		{[]string{"-f", "fast"}, nil, "invalid value"},
		{[]string{"--nope"}, nil, "not defined"},
		{[]string{"-d", "1", "stray"}, nil, "unexpected argument"},
		{[]string{"-E", "--", "sleep", "1"}, func(o *options) bool { return slices.Equal(o.command, []string{"sleep", "1"}) && o.folded }, ""},
		{[]string{"--", "sh", "-c", "x -y"}, func(o *options) bool { return slices.Equal(o.command, []string{"sh", "-c", "x -y"}) }, ""},
		{[]string{"-t", "5,6", "-C", "0-1", "-e", "page-faults", "-c", "10"}, func(o *options) bool {
			return slices.Equal(o.tids, []uint32{5, 6}) && o.cpus == "0-1" && o.event == "page-faults" && o.period == 10
		}, ""},
		{[]string{"--cgroup", "system.slice", "-l"}, func(o *options) bool { return o.cgroup == "system.slice" && o.list }, ""},
		{[]string{"-p", "1", "--", "true"}, nil, "choose one of -p, -t and -- CMD"},
		{[]string{"-p", "1", "-t", "2"}, nil, "choose one of"},
		{[]string{"-f", "99", "-c", "1000"}, nil, "choose one of -f"},
		{[]string{"-F", "999"}, func(o *options) bool { return o.freqHz == 999 && o.freqSet }, ""},
		{[]string{"-F", "99", "-c", "10"}, nil, "choose one of -f"},
		{[]string{"-c", "0"}, nil, "-c 0: the count must be at least 1"},
		{[]string{"-t", "x"}, nil, `bad tid "x"`},
		{[]string{"-t", "0"}, nil, `bad tid "0"`},
		{[]string{"--ring-size", "3000"}, nil, "power of two"},
		{[]string{"-a", "-g", "-d", "1"}, func(o *options) bool { return o.duration == time.Second }, ""},
		// -- CMD writes to stdout: profiles go to a file.
		{[]string{"-E", "--", "make"}, func(o *options) bool { return o.output == "gprofile.folded" && o.format == formatFolded }, ""},
		{[]string{"--format", "json", "--", "make"}, func(o *options) bool { return o.output == "gprofile.json" }, ""},
		{[]string{"--format", "text", "--", "make"}, func(o *options) bool { return o.output == "gprofile.txt" }, ""},
		{[]string{"-E", "-o", "-", "--", "make"}, nil, "with -- CMD the command writes to stdout too"},
		{[]string{"-E", "-o", "make.folded", "--", "make"}, func(o *options) bool { return o.output == "make.folded" }, ""},
		// Extensions and formats.
		{[]string{"--format", "html"}, func(o *options) bool { return o.output == "gprofile.html" && o.format == formatHTML }, ""},
		{[]string{"-o", "x.svg"}, nil, "gprofile writes no .svg files"},
		{[]string{"-o", "perf.data"}, nil, "gprofile writes no .data files"},
		{[]string{"-E", "-o", "a.pb.gz"}, nil, "-E writes folded, but -o a.pb.gz names a pprof file"},
		{[]string{"--format", "text", "-o", "a.json"}, nil, "--format text writes text, but -o a.json names a json file"},
		{[]string{"-o", "a.PB.GZ"}, func(o *options) bool { return o.format == formatPprof }, ""},
		{[]string{"-o", "profile"}, func(o *options) bool { return o.format == formatPprof }, ""},
		{[]string{"-E", "-o", "/dev/null"}, func(o *options) bool { return o.format == formatFolded }, ""},
	} {
		var stderr bytes.Buffer
		o, err := parseFlags(c.argv, &stderr)
		if c.errSub != "" {
			if err == nil || !strings.Contains(err.Error(), c.errSub) {
				t.Errorf("%v: error %v, want one containing %q", c.argv, err, c.errSub)
			}
			continue
		}
		if err != nil || !c.check(o) {
			t.Errorf("%v: parsed as %+v, %v", c.argv, o, err)
		}
	}
}

func TestHelp(t *testing.T) {
	var stderr bytes.Buffer
	_, err := parseFlags([]string{"-h"}, &stderr)
	if !errors.Is(err, errHelp) {
		t.Fatalf("-h gave %v", err)
	}
	for _, want := range []string{"Examples:", "sudo gprofile -f 99 -d 10", "--sw-event", "-p pids"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, stderr.String())
		}
	}
}

// TestFlagErrorIsOneLine: a bad flag prints nothing itself (main prints
// one line and the pointer to -h), unlike the flag package's default of
// the whole help.
func TestFlagErrorIsOneLine(t *testing.T) {
	for _, argv := range [][]string{{"--nope"}, {"-f", "fast"}, {"-d", "0"}} {
		var stderr bytes.Buffer
		if _, err := parseFlags(argv, &stderr); err == nil || stderr.Len() != 0 {
			t.Errorf("%v: error %v, stderr %q; want an error and nothing printed", argv, err, stderr.String())
		}
	}
}

// TestPerfFlags: -a and -g are accepted with one line saying why they
// are not needed (none with -q); --version prints one line.
func TestPerfFlags(t *testing.T) {
	var stderr bytes.Buffer
	if _, err := parseFlags([]string{"-a", "-g"}, &stderr); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "gprofile: -a is the default") || !strings.HasPrefix(lines[1], "gprofile: -g is the default") {
		t.Errorf("-a -g said %q", stderr.String())
	}
	stderr.Reset()
	if _, err := parseFlags([]string{"-q", "-a", "-g"}, &stderr); err != nil || stderr.Len() != 0 {
		t.Errorf("-q -a -g: %v, said %q", err, stderr.String())
	}
	stderr.Reset()
	if _, err := parseFlags([]string{"--version"}, &stderr); !errors.Is(err, errVersion) ||
		!strings.HasPrefix(stderr.String(), "gprofile ") || strings.Count(stderr.String(), "\n") != 1 {
		t.Errorf("--version: %v, %q", err, stderr.String())
	}
}

// TestPprofToTerminal: pprof is gzip, not for a terminal: -o - with
// stdout a terminal is refused; folded stacks are fine there.
func TestPprofToTerminal(t *testing.T) {
	saved := stdoutIsTerminal
	defer func() { stdoutIsTerminal = saved }()
	stdoutIsTerminal = func() bool { return true }
	var stderr bytes.Buffer
	if _, err := parseFlags([]string{"-o", "-"}, &stderr); err == nil || !strings.Contains(err.Error(), "not writing gzip-compressed pprof to a terminal") {
		t.Errorf("-o - on a terminal: %v", err)
	}
	if o, err := parseFlags([]string{"-E"}, &stderr); err != nil || o.output != "-" {
		t.Errorf("-E on a terminal: %+v, %v", o, err)
	}
	stdoutIsTerminal = func() bool { return false }
	if _, err := parseFlags([]string{"-o", "-"}, &stderr); err != nil {
		t.Errorf("-o - into a pipe: %v", err)
	}
}

// TestUsageErrorsExit2: every bad value, whether the flag parser or the
// machine finds it (an event, CPU, pid, tid, cgroup or frequency it does
// not have), exits 2 with one line and the pointer to -h.
func TestUsageErrorsExit2(t *testing.T) {
	testutil.RequirePrivileges(t)
	for _, argv := range [][]string{
		{"--nope"}, {"-f", "fast"}, {"-c", "0"}, {"-o", "x.svg"}, {"-E", "-o", "a.pb.gz"},
		{"-C", "x"}, {"-C", "4096"}, {"-e", "no-such-event"}, {"-e", "sched:no_such_tracepoint"},
		{"-p", "999999999"}, {"-t", "999999999"}, {"--cgroup", "no/such/cgroup"},
		{"-f", "100000000"}, {"--ring-size", "12345"},
	} {
		// -d 1: a flag that is wrongly accepted does not hang the test.
		_, stderr, code := runGprofile(t, append(argv, "-d", "1")...)
		lines := strings.Split(strings.TrimSpace(string(stderr)), "\n")
		if code != 2 || len(lines) != 2 || lines[1] != "run 'gprofile -h' for usage" {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line with the pointer to -h", argv, code, stderr)
		}
		if argv[0] == "-t" && !strings.Contains(lines[0], "tid") {
			t.Errorf("%v: %q does not say tid", argv, lines[0])
		}
	}
}
