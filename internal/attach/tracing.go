package attach

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// attachTracing loads and attaches the tracepoint programs: with target
// pids, task_newtask adds the processes targets fork to the map and
// sched_process_exec turns on a target waiting for its exec; with
// ReportExits, task_newtask, sched_process_exec and sched_process_exit
// report new processes (with their parent), execs and ended processes. They are raw tracepoint programs (exec, exit: they
// read only the current task) and a classic one (task_newtask, whose
// record gives the child's pid): neither loading nor attaching them needs
// kernel BTF. When task_newtask's id or record layout cannot be read from
// tracefs (not mounted and not mountable), forks are followed by a raw
// tracepoint that reads the child with CO-RE instead (followForksRaw).
// What cannot be loaded or attached gets a note saying what does not
// work; only AtExec makes a missing sched_process_exec an error.
func (s *Sampler) attachTracing(spec *ebpf.CollectionSpec) error {
	if s.cfg.PIDs == nil && !s.cfg.ReportExits {
		return nil
	}
	var progs struct {
		FollowFork  *ebpf.Program `ebpf:"follow_fork"`
		StartAtExec *ebpf.Program `ebpf:"start_at_exec"`
		ReportExit  *ebpf.Program `ebpf:"report_exit"`
	}
	opts := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{
		"targets": s.objs.Targets, "counters": s.objs.Counters,
		"events": s.objs.Events, "scratch": s.objs.Scratch,
		"target_tids": s.objs.TargetTids, "tp_hits": s.objs.TpHits,
		"stack_tops": s.objs.StackTops,
	}}
	if err := spec.LoadAndAssign(&progs, opts); err != nil {
		if s.cfg.AtExec {
			return permissionError("load tracepoint programs", err)
		}
		s.logf("gprofile: cannot follow forks, execs and exits (load tracepoint programs: %v)\n", err)
		return nil
	}
	defer progs.FollowFork.Close()
	defer progs.StartAtExec.Close()
	defer progs.ReportExit.Close()
	tp := func(name string) string { return spec.Programs[name].AttachTo }
	if s.cfg.ReportExits {
		if err := s.attachTracepoint(progs.ReportExit, tp("report_exit")); err != nil {
			s.logf("gprofile: exits of processes are not reported (%v)\n", err)
		}
	}
	if s.cfg.AtExec || s.cfg.ReportExits {
		err := s.attachTracepoint(progs.StartAtExec, tp("start_at_exec"))
		if err != nil && s.cfg.AtExec {
			return err
		}
		if err != nil {
			s.logf("gprofile: execs of processes are not reported (%v)\n", err)
		}
		s.execsReported = err == nil && s.cfg.ReportExits
	}
	err := checkTracepointFormat(tp("follow_fork"), newtaskFields)
	if err == nil {
		err = s.attachTracepoint(progs.FollowFork, tp("follow_fork"))
	}
	if err != nil {
		if rawErr := s.followForksRaw(err); rawErr != nil {
			what := "processes forked by the targets are not followed"
			if s.cfg.PIDs == nil {
				what = "forks are not reported (a forked process that exits before its first sample is read has no names)"
			}
			s.logf("gprofile: %s (%v; %v)\n", what, err, rawErr)
		}
	}
	return nil
}

// attachTracepoint attaches p to a tracepoint: a raw tracepoint program
// to the tracepoint named tp (raw_tracepoint/sched_process_exit), a
// classic one to "group/name" as in its section name
// (tracepoint/task/task_newtask).
func (s *Sampler) attachTracepoint(p *ebpf.Program, tp string) error {
	var l link.Link
	var err error
	if p.Type() == ebpf.RawTracepoint {
		l, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: tp, Program: p})
	} else {
		group, name, _ := strings.Cut(tp, "/")
		l, err = link.Tracepoint(group, name, p, nil)
	}
	if err != nil {
		return permissionError("attach tracepoint "+tp, err)
	}
	s.links = append(s.links, l)
	s.verbosef("BPF: attached %s to %s %s\n", p, p.Type(), tp)
	return nil
}

// traceField is a field of a tracepoint's record: its name, offset and
// size in bytes, as the tracepoint's format file in tracefs gives them.
type traceField struct {
	name         string
	offset, size int
}

// newtaskFields are the fields of task/task_newtask that follow_fork
// reads (struct task_newtask_args in bpf/profile.bpf.c).
var newtaskFields = []traceField{{"pid", 8, 4}, {"clone_flags", 32, 8}}

// checkTracepointFormat checks that the record of tracepoint tp
// ("group/name") has the fields want, at their offsets and sizes, in
// <tracefs>/events/group/name/format.
func checkTracepointFormat(tp string, want []traceField) error {
	events, err := hostEvents.eventsDir()
	if err != nil {
		return err
	}
	format, err := os.ReadFile(filepath.Join(events, tp, "format"))
	if err != nil {
		return fmt.Errorf("read tracepoint format: %w", err)
	}
	return checkFields(tp, string(format), want)
}

// checkFields checks the text of tracepoint tp's format file against want.
func checkFields(tp, format string, want []traceField) error {
	for _, w := range want {
		got, ok := formatField(format, w.name)
		if !ok {
			return fmt.Errorf("tracepoint %s has no field %s", tp, w.name)
		}
		if got != w {
			return fmt.Errorf("tracepoint %s: field %s at offset %d, %d bytes; gprofile was built for offset %d, %d bytes",
				tp, w.name, got.offset, got.size, w.offset, w.size)
		}
	}
	return nil
}

// formatField finds a field in the text of a tracepoint's format file,
// whose lines read "field:u64 clone_flags;\toffset:32;\tsize:8;\tsigned:0;".
func formatField(format, name string) (traceField, bool) {
	for line := range strings.Lines(format) {
		decl, rest, _ := strings.Cut(strings.TrimSpace(line), ";")
		decl, ok := strings.CutPrefix(decl, "field:")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(decl[strings.LastIndexAny(decl, " *")+1:], "[")
		if n != name {
			continue
		}
		f := traceField{name: name, offset: -1, size: -1}
		for attr := range strings.SplitSeq(rest, ";") {
			k, v, _ := strings.Cut(strings.TrimSpace(attr), ":")
			i, err := strconv.Atoi(v)
			switch {
			case err != nil:
			case k == "offset":
				f.offset = i
			case k == "size":
				f.size = i
			}
		}
		return f, true
	}
	return traceField{}, false
}
