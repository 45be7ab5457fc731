package counter

import (
	"fmt"
	"strings"

	"github.com/gprofile/gprofile/internal/attach"
)

// DefaultEvents is perf stat's default set, in its order.
var DefaultEvents = []string{
	"task-clock", "context-switches", "cpu-migrations", "page-faults",
	"cycles", "instructions", "branches", "branch-misses",
}

// EventParser resolves one event name to the event to open. attach.ParseEvent
// is the parser for hardware, software and tracepoint events; a parser for
// more kinds (probes) can wrap it.
type EventParser func(name string) (attach.Event, error)

// Spec is one event to count. Events of one group (written {a,b}) share
// a leader and are scheduled on the PMU together.
type Spec struct {
	Name  string // as written in the list ("branches"); Event.Name is the canonical one
	Event attach.Event
	// Group is the index, in the list, of the group's leader; an event
	// outside braces is its own leader.
	Group int
}

// Leader reports whether the spec at index i of a list leads its group.
func (s Spec) Leader(i int) bool { return s.Group == i }

// ParseList parses perf's -e syntax: names separated by commas, and
// groups in braces, "{cycles,instructions},page-faults". Several -e
// flags are joined with commas before. Each name goes through parse.
// Errors: an empty name, unbalanced braces, nested groups, or the
// parser's own error (wrapping attach.ErrUnknownEvent for a bad name).
func ParseList(list string, parse EventParser) ([]Spec, error) {
	var specs []Spec
	inGroup, leader := false, -1
	for _, tok := range strings.Split(list, ",") {
		tok = strings.TrimSpace(tok)
		open := strings.HasPrefix(tok, "{")
		if open {
			if inGroup {
				return nil, fmt.Errorf("event list %q: groups do not nest", list)
			}
			tok, inGroup, leader = tok[1:], true, len(specs)
		}
		closing := strings.HasSuffix(tok, "}")
		if closing {
			if !inGroup {
				return nil, fmt.Errorf("event list %q: '}' without '{'", list)
			}
			tok = tok[:len(tok)-1]
		}
		if tok == "" || strings.ContainsAny(tok, "{}") {
			return nil, fmt.Errorf("event list %q: empty or malformed event name", list)
		}
		ev, err := parse(tok)
		if err != nil {
			return nil, err
		}
		g := len(specs)
		if inGroup {
			g = leader
		}
		specs = append(specs, Spec{Name: tok, Event: ev, Group: g})
		if closing {
			inGroup = false
		}
	}
	if inGroup {
		return nil, fmt.Errorf("event list %q: '{' without '}'", list)
	}
	return specs, nil
}
