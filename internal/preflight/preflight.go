package preflight

import (
	"fmt"
	"io"
	"strings"
)

// Status is the verdict of one check.
type Status int

const (
	// OK: nothing missing.
	OK Status = iota
	// Note: a fact about the machine that takes nothing from a profile
	// (no PMU: cpu-clock gives the same stacks).
	Note
	// Warn: a profile would miss something (names, frames, processes).
	Warn
)

func (s Status) String() string {
	return [...]string{"ok", "note", "warn"}[s]
}

// Item is the result of one check: Name is what was checked
// ("perf_event_max_stack"), Detail what was found, and Fix, for a Warn or
// a Note that can be changed, the command that fixes it.
type Item struct {
	Name   string
	Status Status
	Detail string
	Fix    string
}

// Write writes one line per item ("ok    name: detail", "warn  name:
// detail; fix: command") and a last line with the verdict, and reports
// whether a profile would be complete (no Warn).
func Write(w io.Writer, items []Item) (complete bool) {
	warns := 0
	for _, it := range items {
		line := fmt.Sprintf("%-5s %s: %s", it.Status, it.Name, it.Detail)
		if it.Fix != "" {
			line += "; fix: " + it.Fix
		}
		fmt.Fprintln(w, line)
		if it.Status == Warn {
			warns++
		}
	}
	if warns == 0 {
		fmt.Fprintln(w, "gprofile check: a profile would be complete")
		return true
	}
	fmt.Fprintf(w, "gprofile check: %d %s missing for a complete profile (the warn lines)\n", warns, plural(warns, "thing", "things"))
	return false
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// join lists names: "a", "a and b", "a, b and c".
func join(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
