package attach

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gprofile/gprofile/internal/probe"
)

// ProbeKind is what a Probe attaches to.
type ProbeKind uint8

// The kinds of probe, by bpftrace's names.
const (
	// Kprobe: the entry of a kernel function (kprobe:SYM[+OFF], globs).
	Kprobe ProbeKind = iota + 1
	// Kretprobe: the return of a kernel function (kretprobe:SYM).
	Kretprobe
	// Uprobe: a function of a binary (uprobe:PATH:SYM[+OFF]).
	Uprobe
	// Uretprobe: the return of a function of a binary (uretprobe:PATH:SYM).
	Uretprobe
	// USDT: a SystemTap SDT probe of a binary (usdt:PATH:PROVIDER:NAME).
	USDT
	// TraceEvent: a kprobe or uprobe event made in tracefs, usually by
	// perf probe (probe:SYM, probe_libc:malloc), attached by its id.
	TraceEvent
)

var kindNames = map[ProbeKind]string{Kprobe: "kprobe", Kretprobe: "kretprobe", Uprobe: "uprobe",
	Uretprobe: "uretprobe", USDT: "usdt", TraceEvent: "trace event"}

// String returns bpftrace's name of the kind ("kprobe", "usdt").
func (k ProbeKind) String() string { return kindNames[k] }

// ErrBadProbe is wrapped by ParseProbe for a probe that cannot be
// attached: bad syntax, or a function, binary or USDT probe that does not
// exist. The error says which and what to do.
var ErrBadProbe = errors.New("bad probe")

// Probe is a place where sampling takes a stack on every hit (every
// Config.Period-th hit). ParseProbe makes one from bpftrace's syntax.
type Probe struct {
	// Spec is the probe as written: "kprobe:do_sys_openat2".
	Spec string
	Kind ProbeKind
	// Symbol is the kernel function, or a shell glob of them (Kprobe),
	// or the binary's function (Uprobe, Uretprobe; "" with Sites).
	Symbol string
	// Offset is the byte offset past Symbol's start (SYM+OFF).
	Offset uint64
	// Path is the binary (Uprobe, Uretprobe, USDT), absolute.
	Path string
	// Sites are the file offsets in Path to probe (Uprobe: the functions
	// matched; USDT: every site of the probe), with their semaphores.
	Sites []ProbeSite
	// TraceEventID is the tracefs id of a TraceEvent.
	TraceEventID uint64
}

// ProbeSite is one place a uprobe is put: a byte offset in the file,
// and the file offset of the semaphore the kernel increments while the
// probe is attached (USDT; 0 for none).
type ProbeSite struct {
	Offset, RefCtrOffset uint64
	Name                 string // the function or provider:name, for messages
}

// IsProbeSpec reports whether s names a probe by one of bpftrace's
// prefixes (kprobe:, kretprobe:, uprobe:, uretprobe:, usdt:) rather than
// an event (a TraceEvent is named like a tracepoint, group:event).
func IsProbeSpec(s string) bool {
	kind, _, ok := strings.Cut(s, ":")
	return ok && slices.Contains([]string{"kprobe", "kretprobe", "uprobe", "uretprobe", "usdt"}, kind)
}

// ParseProbe parses a probe in bpftrace's syntax and resolves it:
//
//   - kprobe:SYM, kprobe:SYM+OFF, kprobe:GLOB (tcp_*), kretprobe:SYM,
//     kretprobe:GLOB: kernel functions, checked against the traceable
//     functions (tracefs available_filter_functions, else /proc/kallsyms);
//   - uprobe:PATH:SYM[+OFF], uprobe:PATH:GLOB, uretprobe:PATH:SYM: PATH is
//     a file, a library name (libc, libc.so.6: found in the maps of pids,
//     else in the system library directories) or a program on PATH;
//   - usdt:PATH:PROVIDER:NAME (.note.stapsdt; a semaphore is set by the
//     kernel while the probe is attached).
//
// A tracefs kprobe or uprobe event (what perf probe makes: probe:SYM,
// probe_libc:malloc) is group:event; ParseProbe takes those too. Errors
// wrap ErrBadProbe (or ErrPermission, ErrNoTracefs) and name what is
// missing.
func ParseProbe(spec string, pids []uint32) (Probe, error) {
	kind, rest, _ := strings.Cut(spec, ":")
	p := Probe{Spec: spec}
	var err error
	switch kind {
	case "kprobe", "kretprobe":
		p.Kind = Kprobe
		if kind == "kretprobe" {
			p.Kind = Kretprobe
		}
		err = p.parseKernel(rest)
	case "uprobe", "uretprobe":
		p.Kind = Uprobe
		if kind == "uretprobe" {
			p.Kind = Uretprobe
		}
		err = p.parseUser(rest, pids)
	case "usdt":
		p.Kind = USDT
		err = p.parseUSDT(rest, pids)
	default:
		p.Kind = TraceEvent
		err = p.parseTraceEvent(spec)
	}
	return p, err
}

func badProbe(spec, format string, args ...any) error {
	return fmt.Errorf("%w %s: %s", ErrBadProbe, spec, fmt.Sprintf(format, args...))
}

// splitOffset splits "SYM+OFF" (OFF decimal or 0x hex).
func splitOffset(s string) (string, uint64, error) {
	sym, off, ok := strings.Cut(s, "+")
	if !ok {
		return s, 0, nil
	}
	n, err := strconv.ParseUint(off, 0, 64)
	if err != nil {
		return "", 0, fmt.Errorf("offset %q is not a number", off)
	}
	return sym, n, nil
}

func (p *Probe) parseKernel(rest string) error {
	sym, off, err := splitOffset(rest)
	if err != nil {
		return badProbe(p.Spec, "%v", err)
	}
	if sym == "" || strings.ContainsAny(sym, ": ") {
		return badProbe(p.Spec, "want %s:FUNCTION[+OFFSET], e.g. %s:do_sys_openat2", p.Kind, p.Kind)
	}
	if off != 0 && (p.Kind == Kretprobe || probe.IsGlob(sym)) {
		return badProbe(p.Spec, "an offset goes with one function's entry (kprobe:SYM+OFF) only")
	}
	p.Symbol, p.Offset = sym, off
	funcs, err := KernelFuncs(sym)
	if err != nil {
		return err
	}
	if len(funcs) == 0 {
		if probe.IsGlob(sym) {
			return badProbe(p.Spec, "no traceable kernel function matches %q (gprofile -l 'kprobe:*name*' lists them)", sym)
		}
		return badProbe(p.Spec, "no traceable kernel function %q (gprofile -l 'kprobe:%s*' lists those that start so)", sym, sym)
	}
	return nil
}

// KernelFuncs returns the traceable kernel functions that match the
// shell glob pattern (or are named pattern), sorted and without
// duplicates: those of tracefs's available_filter_functions (functions
// ftrace can patch: what kprobes and fentry attach to best), or, without
// tracefs, the text symbols of /proc/kallsyms.
func KernelFuncs(pattern string) ([]string, error) {
	names, err := kernelFuncNames()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		if n == pattern {
			out = append(out, n)
		} else if ok, _ := filepath.Match(pattern, n); ok && probe.IsGlob(pattern) {
			out = append(out, n)
		}
	}
	return slices.Compact(out), nil
}

func kernelFuncNames() ([]string, error) {
	var names []string
	if events, err := hostEvents.eventsDir(); err == nil {
		f, err := os.Open(filepath.Join(filepath.Dir(events), "available_filter_functions"))
		if err == nil {
			defer f.Close()
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				name, _, _ := strings.Cut(sc.Text(), " ")
				names = append(names, name)
			}
			if sc.Err() == nil {
				slices.Sort(names)
				return names, nil
			}
			names = names[:0]
		}
	}
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		return nil, fmt.Errorf("list kernel functions: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 3 && (fields[1] == "t" || fields[1] == "T") {
			names = append(names, fields[2])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read /proc/kallsyms: %w", err)
	}
	slices.Sort(names)
	return names, nil
}

func (p *Probe) parseUser(rest string, pids []uint32) error {
	i := strings.LastIndex(rest, ":")
	if i <= 0 || i == len(rest)-1 {
		return badProbe(p.Spec, "want %s:PATH:FUNCTION[+OFFSET], e.g. %s:libc:malloc", p.Kind, p.Kind)
	}
	sym, off, err := splitOffset(rest[i+1:])
	if err != nil {
		return badProbe(p.Spec, "%v", err)
	}
	if off != 0 && (p.Kind == Uretprobe || probe.IsGlob(sym)) {
		return badProbe(p.Spec, "an offset goes with one function's entry (uprobe:PATH:SYM+OFF) only")
	}
	if p.Path, err = ResolveBinary(rest[:i], pids); err != nil {
		return badProbe(p.Spec, "%v", err)
	}
	funcs, err := binaryFuncs(p.Path)
	if err != nil {
		return badProbe(p.Spec, "%v", err)
	}
	matched, err := probe.Match(funcs, sym)
	if err != nil {
		return badProbe(p.Spec, "%v", err)
	}
	if len(matched) == 0 {
		return badProbe(p.Spec, "%s has no function %q (gprofile -l 'uprobe:%s:*' lists them)", p.Path, sym, p.Path)
	}
	p.Symbol, p.Offset = sym, off
	for _, f := range matched {
		if off != 0 && f.Size != 0 && off >= f.Size {
			return badProbe(p.Spec, "offset %d is past the end of %s (%d bytes)", off, f.Name, f.Size)
		}
		p.Sites = append(p.Sites, ProbeSite{Offset: f.Offset + off, Name: f.Name})
	}
	return nil
}

// binaryFuncs reads the function symbols of the ELF file at path.
func binaryFuncs(path string) ([]probe.Func, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	funcs, err := probe.Funcs(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return funcs, nil
}

func (p *Probe) parseUSDT(rest string, pids []uint32) error {
	parts := strings.Split(rest, ":")
	if len(parts) < 3 {
		return badProbe(p.Spec, "want usdt:PATH:PROVIDER:NAME (gprofile -l usdt:PATH lists a binary's probes)")
	}
	n := len(parts)
	provider, name := parts[n-2], parts[n-1]
	var err error
	if p.Path, err = ResolveBinary(strings.Join(parts[:n-2], ":"), pids); err != nil {
		return badProbe(p.Spec, "%v", err)
	}
	notes, err := binaryNotes(p.Path)
	if err != nil {
		return badProbe(p.Spec, "%v", err)
	}
	for _, nt := range notes {
		if nt.Provider == provider && nt.Name == name {
			if nt.Offset == 0 {
				return badProbe(p.Spec, "probe site at %#x is in no executable segment of %s", nt.PC, p.Path)
			}
			p.Sites = append(p.Sites, ProbeSite{Offset: nt.Offset, RefCtrOffset: nt.SemaphoreOffset, Name: provider + ":" + name})
		}
	}
	if len(p.Sites) == 0 {
		return badProbe(p.Spec, "%s has no USDT probe %s:%s (gprofile -l usdt:%s lists them)", p.Path, provider, name, p.Path)
	}
	return nil
}

// binaryNotes reads the USDT notes of the ELF file at path.
func binaryNotes(path string) ([]probe.Note, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	notes, err := probe.Notes(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return notes, nil
}

// libDirs are where ResolveBinary looks for a library by name when no
// target process maps it (Debian's multiarch directories first).
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib", "/usr/local/lib"}

// ResolveBinary finds the file a probe names: a path (with a /) as is; a
// library name (libc, c, libc.so.6) in the maps of pids (/proc/PID/maps),
// then in the system library directories; else a program on $PATH. The
// result is absolute, and the file exists.
func ResolveBinary(name string, pids []uint32) (string, error) {
	if name == "" {
		return "", errors.New("empty binary path")
	}
	if strings.Contains(name, "/") {
		abs, err := filepath.Abs(name)
		if err == nil {
			_, err = os.Stat(abs)
		}
		if err != nil {
			return "", fmt.Errorf("binary %s: %w", name, err)
		}
		return abs, nil
	}
	for _, pid := range pids {
		if p := libInMaps(fmt.Sprintf("/proc/%d/maps", pid), name); p != "" {
			return fmt.Sprintf("/proc/%d/root%s", pid, p), nil
		}
	}
	for _, dir := range libDirs {
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if p := filepath.Join(dir, e.Name()); libMatches(e.Name(), name) && isELF(p) {
				return filepath.EvalSymlinks(p)
			}
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return filepath.Abs(p)
	}
	return "", fmt.Errorf("no library or program %q (in the targets' maps, %s or $PATH): give its path", name, strings.Join(libDirs[:2], ", "))
}

// isELF reports whether the file at path starts with the ELF magic (a
// libc.so may be a linker script).
func isELF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	_, err = io.ReadFull(f, magic[:])
	return err == nil && string(magic[:]) == "\x7fELF"
}

// libInMaps returns the path of the first file mapped in the maps file
// whose base name is library name's.
func libInMaps(maps, name string) string {
	f, err := os.Open(maps)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !strings.HasPrefix(fields[5], "/") {
			continue
		}
		if libMatches(filepath.Base(fields[5]), name) {
			return fields[5]
		}
	}
	return ""
}

// libMatches reports whether file is the shared library name: exactly,
// or name (with "lib" added unless there) followed by ".so" or "-" (a
// versioned name: libc.so.6, libpython3.11.so, libstdc++.so.6).
func libMatches(file, name string) bool {
	if file == name {
		return strings.Contains(file, ".so")
	}
	if !strings.HasPrefix(name, "lib") {
		name = "lib" + name
	}
	rest, ok := strings.CutPrefix(file, name)
	return ok && (strings.HasPrefix(rest, ".so") || strings.HasPrefix(rest, "-") && strings.Contains(rest, ".so"))
}

// parseTraceEvent takes group:event, a kprobe or uprobe event of tracefs
// (perf probe's), reading its id.
func (p *Probe) parseTraceEvent(spec string) error {
	group, event, ok := strings.Cut(spec, ":")
	if !ok || !validTraceName(group) || !validTraceName(event) {
		return badProbe(spec, "want kprobe:, kretprobe:, uprobe:, uretprobe:, usdt: or a perf probe event group:event")
	}
	events, err := hostEvents.eventsDir()
	if err != nil {
		return err
	}
	if !isDynamicEvent(filepath.Dir(events), group, event) {
		return badProbe(spec, "not a kprobe or uprobe event of tracefs (perf probe makes those)")
	}
	b, err := os.ReadFile(filepath.Join(events, group, event, "id"))
	if errors.Is(err, fs.ErrNotExist) {
		return badProbe(spec, "no such event in %s", events)
	}
	if err != nil {
		return fmt.Errorf("read the id of %s: %w", spec, err)
	}
	if p.TraceEventID, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err != nil {
		return badProbe(spec, "bad id in tracefs: %v", err)
	}
	return nil
}

// IsTraceEventProbe reports whether the tracepoint-like name group:event
// is a kprobe or uprobe event of tracefs (made by perf probe), which
// takes a probe program, not the tracepoint one.
func IsTraceEventProbe(name string) bool {
	group, event, ok := strings.Cut(name, ":")
	if !ok {
		return false
	}
	events, err := hostEvents.eventsDir()
	return err == nil && isDynamicEvent(filepath.Dir(events), group, event)
}

// isDynamicEvent looks for group/event among the kprobe and uprobe
// events of the tracefs at root: lines of kprobe_events and uprobe_events
// read "p:group/event target" or "r:group/event target".
func isDynamicEvent(root, group, event string) bool {
	want := group + "/" + event
	for _, file := range []string{"kprobe_events", "uprobe_events"} {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			def, _, _ := strings.Cut(line, " ")
			if _, name, ok := strings.Cut(def, ":"); ok && name == want {
				return true
			}
		}
	}
	return false
}
