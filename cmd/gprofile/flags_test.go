package main

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gprofile/gprofile/internal/attach"
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
