package main

import (
	"io"
	"slices"
	"strings"
	"testing"
)

func TestStatFlags(t *testing.T) {
	o, err := parseStatFlags([]string{"-x,", "-r3", "-e", "cs", "-e", "{task-clock,page-faults}", "--", "ls", "-x"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.sep != "," || o.runs != 3 || !slices.Equal(o.command, []string{"ls", "-x"}) || strings.Join(o.events, ",") != "cs,{task-clock,page-faults}" {
		t.Errorf("parsed %+v", o)
	}
	for _, bad := range [][]string{
		{},                               // nothing to count
		{"-r", "0", "--", "true"},        // runs
		{"-x,", "--json", "--", "true"},  // two formats
		{"-p", "1", "-a"},                // two targets
		{"-r", "2", "-a"},                // -r without a command
		{"-p", "-5"},                     // not a pid
		{"--no-such-flag", "--", "true"}, // unknown flag
	} {
		if _, err := parseStatFlags(bad, io.Discard); err == nil {
			t.Errorf("parseStatFlags(%q) accepted", bad)
		}
	}
	specs, _, err := statSpecs(&statOptions{all: true})
	if err != nil || specs[0].Name != "cpu-clock" || len(specs) != 8 {
		t.Errorf("-a default events: %v %v", specs, err)
	}
}
