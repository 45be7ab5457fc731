package symbolize

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gprofile/gprofile/internal/symbolize/debuginfo"
	"github.com/gprofile/gprofile/internal/symbolize/debuginfo/debuginfod"
	"github.com/gprofile/gprofile/internal/symbolize/kallsyms"
	"github.com/gprofile/gprofile/internal/symbolize/objfile"
)

// Options configures a Symbolizer. The zero value reads the live system.
type Options struct {
	// ProcRoot is the procfs mount to read <ProcRoot>/PID/maps,
	// <ProcRoot>/PID/root, <ProcRoot>/PID/map_files, <ProcRoot>/modules and
	// <ProcRoot>/self (the vDSO) from; "" means "/proc".
	ProcRoot string
	// KallsymsPath is the kernel symbol file; "" means "/proc/kallsyms".
	KallsymsPath string
	// KernelLookup, when not nil, opens a KernelLookup that names kernel
	// addresses on demand (cmd/gprofile passes a wrapper of
	// ksym.OpenLookup): tried first, on the goroutine that
	// loads kernel symbols, it makes listing kallsyms (KallsymsIter,
	// KallsymsPath) unnecessary, which are used only when it fails to
	// open. Close closes it.
	KernelLookup func() (KernelLookup, error)
	// KallsymsIter, when not nil, lists the kernel's symbols from another
	// source than KallsymsPath (cmd/gprofile passes ksym.LoadIter, the
	// BPF kallsyms iterator), which is tried before KallsymsPath: the
	// iterator costs the kernel less than the text file
	// (BenchmarkKallsymsLoad, BenchmarkOpenKallsymsIter). New calls it
	// once, on the goroutine that loads kernel symbols. When it fails,
	// KallsymsPath is read instead (Note names both errors if that fails
	// too). nil reads only KallsymsPath.
	KallsymsIter func() (*kallsyms.Table, error)
	// DebugDirs are the global directories (host paths) searched for
	// separate debug files, by build ID and by .gnu_debuglink, as in
	// debuginfo.Options; nil means DefaultDebugDirs() (/usr/lib/debug), an
	// empty, non-nil slice searches none. A binary's .gnu_debuglink file
	// is also looked for next to it, in the process's mount namespace.
	DebugDirs []string
	// Debuginfod configures the debuginfod client (servers, cache,
	// timeouts: cmd/gprofile reads them from elfutils' environment
	// variables with debuginfod.ReadConfig); the zero value, no server,
	// never touches the network. Downloads run in the background (see
	// Generation).
	Debuginfod debuginfod.Config
	// CacheDir, when not "", keeps the inflated bytes of binaries'
	// compressed DWARF sections there, by build ID (debuginfo.Options.CacheDir),
	// so that the next run reads them instead of inflating them again,
	// and the source lines DWARF gave (objfile.Binary.Lines), and the
	// KernelLookup's names of the kernel image's addresses for later runs
	// of this boot; Close, and the sweep of binaries no process maps any
	// more, write what this run added. cmd/gprofile passes
	// $XDG_CACHE_HOME/gprofile (or ~/.cache/gprofile).
	CacheDir string
}

// Symbolizer names the addresses of sampled stacks, kernel and user. It
// caches kernel symbols (loaded once by New), one entry per process
// (its executable mappings from /proc/PID/maps, read when the process is
// first seen or has exec'd, and every address it resolved), and one
// entry per binary (keyed by device and inode, shared by all processes;
// opened when a process that maps it is first seen, read at its first
// lookup). A process's entry stays after it exited, so that samples
// read late still get names, until Forget or Close: callers that see
// many short-lived processes should Forget each one after its last
// sample.
//
// Inside, a process table (one lock: the processes, their mappings and
// address caches, what Observe touches) sits beside a binary cache (its
// own lock; each binary read once, with neither lock held). Stack calls
// are serialized; Observe may be called from another goroutine at the
// same time (the one reading samples), so that a process is seen while
// it lives even when Stack is busy reading a large binary's debug
// information. Generation may be called from any
// goroutine. Debug files downloaded from debuginfod servers arrive in the
// background (see Generation); Close cancels the downloads.
type Symbolizer struct {
	// stackMu serializes Stack and BadReturnAddress, which own the
	// resolution fields of each procMapping, the vDSO and the scratch.
	stackMu    sync.Mutex
	procs      procTable // its own lock, procs.mu, which also guards stats
	debugDirs  []string
	cacheDir   string
	kernel     *kernelSymbolizer
	bins       binCache // its own lock
	vdso       *objfile.Binary
	vdsoSize   uint64
	vdsoTried  bool
	debuginfod *debuginfod.Client  // nil when off
	fetch      *debuginfod.Fetcher // its downloads (generation.go)
	applied    uint64              // fetch generation applied (applyArrivals)
	stats      Stats               // under procs.mu; Processes, Binaries and PerfMapLinesSkipped are filled in by Stats
	// Stack's scratch (Stack runs on one goroutine at a time): the user
	// frames' resolutions, and those left to resolveIn with their mappings.
	infos    []frameInfo
	todo     []int
	todoMaps []*procMapping
	calls    callSites // BadReturnAddress (callsite.go)
}

// Stats counts what a Symbolizer did since New.
type Stats struct {
	// Frames counts the frames that Stack returned, indexed by Reason:
	// Frames[ReasonNone] were named, the others were not, for that reason.
	// Every returned frame counts, cache hits included.
	Frames [numReasons]uint64
	// Processes and Binaries are the number of processes and of binaries
	// (device and inode) cached now; Binaries includes files found not
	// to be ELF, and files opened but not read yet.
	Processes, Binaries int
	// PerfMapLinesSkipped counts the lines of perf maps
	// (/tmp/perf-PID.map) skipped as malformed or longer than 4 KiB.
	PerfMapLinesSkipped uint64
}

// Named returns the number of frames named.
func (s Stats) Named() uint64 { return s.Frames[ReasonNone] }

// Unnamed returns the number of frames that could not be named.
func (s Stats) Unnamed() uint64 {
	var n uint64
	for r := ReasonNone + 1; r < numReasons; r++ {
		n += s.Frames[r]
	}
	return n
}

// New returns a Symbolizer that opens opts.KernelLookup, or else (or when
// it fails) loads the kernel's symbols from opts.KallsymsIter, else (or
// when it fails) from opts.KallsymsPath, and module extents from
// <ProcRoot>/modules, in the background; the first kernel frame (or Note)
// waits for them. A
// missing, unreadable or hidden (kptr_restrict) kallsyms is not an error:
// kernel frames then stay unnamed and Note says why. Debug files that
// debuginfod servers (DEBUGINFOD_URLS) must send are downloaded in the
// background, not by New (see Generation). The error is always nil
// today; it is part of the signature so that a future source that can
// fail at start-up need not change it.
func New(opts Options) (*Symbolizer, error) {
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	if opts.KallsymsPath == "" {
		opts.KallsymsPath = "/proc/kallsyms"
	}
	if opts.DebugDirs == nil {
		opts.DebugDirs = debuginfo.DefaultDebugDirs()
	}
	var client *debuginfod.Client
	if cfg := opts.Debuginfod; len(cfg.URLs) > 0 && cfg.Cache != "" {
		client = debuginfod.NewClient(cfg)
	}
	s := &Symbolizer{
		debuginfod: client,
		debugDirs:  opts.DebugDirs,
		cacheDir:   opts.CacheDir,
		kernel:     newKernelSymbolizer(opts.KernelLookup, opts.KallsymsIter, opts.KallsymsPath, opts.ProcRoot, opts.CacheDir),
		bins:       binCache{m: make(map[binKey]*binEntry)},
		fetch:      debuginfod.NewFetcher(),
	}
	s.procs.init(opts.ProcRoot, s.prepareAll)
	return s, nil
}

// Note returns one line, for the user, on why kernel frames cannot be
// named (kallsyms hidden by kernel.kptr_restrict, or unreadable), or ""
// when kernel symbols are available. It waits for the KernelLookup to
// open, or for kallsyms to be listed where that failed (New starts both
// in the background): call it after the rest of the start-up to hide
// them (ksym's BenchmarkKernelSymbolLookup and kallsyms'
// BenchmarkKallsymsLoad measure them).
func (s *Symbolizer) Note() string {
	s.procs.mu.Lock()
	defer s.procs.mu.Unlock()
	s.kernel.wait()
	return s.kernel.note
}

// Stack symbolizes one sample of process pid (the thread group id, as
// /proc names processes). kernelIPs and userIPs are the callchains as
// sampled, each leaf first; the leaf (index 0) is looked up at its address
// and every other (a return address) at address-1, while Frame.Address
// keeps the value given. The result is a new Stack owned by the caller:
// kernel frames first, then user frames, in the order given. A user
// address with DWARF inlining information gives several frames, all with
// its Address and Mapping: the inlined functions innermost first
// (Inlined), then the physical function; every other address gives one
// frame. File and Line come from DWARF or .gopclntab where the binary
// (or its debug file) has them. Frames that cannot be named keep their
// address and, where known, their mapping and source line; their Reason
// says why. A process whose maps could not be read when first seen gives
// ReasonProcessGone (it exited) or ReasonNoAccess (permission), and a nil
// Mapping. With kallsyms hidden or unreadable, kernel frames carry the
// [kernel.kallsyms] mapping with the range [0, 2^64-1). Stack never
// waits for a debuginfod download: see Generation.
//
// The process table's lock is held while the addresses are looked up in
// the caches and the maps, and released while binaries are read and
// their lines looked up (resolveIn), so that Observe goes on meanwhile.
func (s *Symbolizer) Stack(pid uint32, kernelIPs, userIPs []uint64) *Stack {
	return s.StackInto(&Stack{}, pid, kernelIPs, userIPs)
}

// StackInto is Stack, writing the frames into dst, whose Frames it reuses
// (their contents are overwritten), and returning dst: a caller that
// only reads a stack before symbolizing the next keeps one Stack instead
// of allocating one each (the collector, for every raw stack new to its
// process).
func (s *Symbolizer) StackInto(dst *Stack, pid uint32, kernelIPs, userIPs []uint64) *Stack {
	s.stackMu.Lock()
	defer s.stackMu.Unlock()
	s.procs.mu.Lock()
	if s.fetch.Gen.Load() != s.applied {
		s.applyArrivals()
	}
	frames := slices.Grow(dst.Frames[:0], len(kernelIPs)+len(userIPs))
	if len(kernelIPs) > 0 {
		s.kernel.prefetch(kernelIPs)
	}
	for i, addr := range kernelIPs {
		fi := s.kernel.resolve(lookupAddr(i, addr))
		frames = s.appendFrames(frames, addr, &fi, true)
	}
	if len(userIPs) == 0 {
		s.procs.mu.Unlock()
		dst.Frames = frames
		return dst
	}
	p := s.procs.process(pid)
	s.procs.checkExec(p, false)
	for i, addr := range userIPs {
		fi, m := s.resolveCached(p, lookupAddr(i, addr))
		if m != nil {
			dst.Frames = s.stackRead(frames, pid, p, userIPs[i:], i, m)
			return dst
		}
		frames = s.appendFrames(frames, addr, &fi, false)
	}
	s.procs.mu.Unlock()
	dst.Frames = frames
	return dst
}

// stackRead appends the frames of userIPs, the user stack from index
// first on, whose first address needs its mapping m read:
// it looks the others up in the process table, releases s.procs.mu while the
// binaries of those that need it are read and their lines found
// (resolveIn), then takes it again to fill the address cache and count
// the frames, and releases it. The caller holds s.procs.mu.
func (s *Symbolizer) stackRead(frames []Frame, pid uint32, p *process, userIPs []uint64, first int, m *procMapping) []Frame {
	la := func(i int) uint64 { return lookupAddr(first+i, userIPs[i]) }
	infos := slices.Grow(s.infos[:0], len(userIPs))[:len(userIPs)]
	todo, maps := append(s.todo[:0], 0), append(s.todoMaps[:0], m)
	for i := 1; i < len(userIPs); i++ {
		fi, m := s.resolveCached(p, la(i))
		if m == nil {
			infos[i] = fi
			continue
		}
		todo = append(todo, i)
		maps = append(maps, m)
	}
	s.procs.mu.Unlock()
	for j, i := range todo {
		addr := la(i)
		if k := slices.IndexFunc(todo[:j], func(k int) bool { return la(k) == addr }); k >= 0 {
			infos[i] = infos[todo[k]] // a recursion's second frame: named already
			continue
		}
		infos[i] = s.resolveIn(pid, maps[j], addr)
	}
	s.procs.mu.Lock()
	defer s.procs.mu.Unlock()
	for _, i := range todo {
		p.cache[la(i)] = infos[i]
	}
	for i, addr := range userIPs {
		frames = s.appendFrames(frames, addr, &infos[i], false)
	}
	clear(infos)
	clear(maps)
	s.infos, s.todo, s.todoMaps = infos, todo, maps
	return frames
}

// lookupAddr returns the address to look up for the i-th frame (leaf
// first): the address itself for the leaf, the call instruction's last
// byte (address-1) for return addresses.
func lookupAddr(i int, addr uint64) uint64 {
	if i == 0 || addr == 0 {
		return addr
	}
	return addr - 1
}

// appendFrames appends the frames of addr, resolved as fi, to frames and
// counts them: one per inlined function (innermost first), then the
// physical frame, which takes the last source line.
func (s *Symbolizer) appendFrames(frames []Frame, addr uint64, fi *frameInfo, kernel bool) []Frame {
	n := len(fi.lines)
	for i := 0; i+1 < n; i++ {
		l := &fi.lines[i]
		f := Frame{
			Address: addr, Function: l.Function, SystemName: l.SystemName,
			File: l.File, Line: l.Line, Inlined: true, Kernel: kernel, Mapping: fi.mapping,
		}
		if f.Function == "" {
			f.Reason = ReasonNoSymbol
		}
		s.stats.Frames[f.Reason]++
		frames = append(frames, f)
	}
	f := Frame{
		Address:     addr,
		Function:    fi.function,
		SystemName:  fi.systemName,
		SymbolStart: fi.start,
		Kernel:      kernel,
		Mapping:     fi.mapping,
		Reason:      fi.reason,
		StartLine:   fi.startLine,
	}
	if n > 0 {
		f.File, f.Line = fi.lines[n-1].File, fi.lines[n-1].Line
	}
	s.stats.Frames[fi.reason]++
	return append(frames, f)
}

// Observe makes sure that process pid has been seen: on first sight it
// reads the process's maps and opens the files mapped executable, and it
// re-reads them when the process has exec'd since (at most every 10 ms),
// so that a later Stack of pid gets names even if the process has
// exited by then. It costs a map lookup when there is nothing to do, and
// a read of /proc/PID/maps when there is. Observe may run
// concurrently with Stack (see Symbolizer); calling it is optional, as
// Stack does the same, but only when it gets to the sample.
func (s *Symbolizer) Observe(pid uint32) {
	s.ObserveStack(pid, nil)
}

// SetExecsReported tells the symbolizer whether every exec of a sampled
// process reaches it through ObserveExec (attach.Sampler.ExecsReported):
// delivered is nil when execs are not reported; else it reports whether
// no exec record has been lost so far (attach.Sampler.EventsDelivered),
// and is called at most every execBackstopInterval. Without records, a
// process with stacks to symbolize has /proc/PID/exe checked at most
// every execCheckInterval; with them, not at all while delivered says
// so, and once it does not (a record lost with a full ring buffer) at
// most every execBackstopInterval. The check is a stat, and a system
// call after an idle spell wakes the Go runtime's sysmon thread at short
// intervals (BENCHMARKS.md, issue 16 sessions 16 and 27).
func (s *Symbolizer) SetExecsReported(delivered func() bool) {
	s.procs.mu.Lock()
	defer s.procs.mu.Unlock()
	s.procs.execsDelivered = delivered
	s.procs.execsLost, s.procs.lostCheck = false, time.Time{}
}

// ObserveExec is Observe for a process known to have just exec'd (an
// exec record): its maps are read now, without Observe's 10 ms between
// exec checks (a check made just before the exec, on a sample of the old
// program, must not hide the new one), and again while it runs the new
// program (settleDelays), whether this is its first sight, /proc/PID/exe
// changed, or the maps were read after the exec already (for a sample
// taken before it), maybe before the dynamic loader mapped the
// libraries.
func (s *Symbolizer) ObserveExec(pid uint32) {
	s.procs.observeExec(pid)
}

// ObserveFork records that process pid was forked by process parent (a
// fork record): if pid has exited by the time it is first seen (Observe,
// Stack, CodeAt), it is named and unwound through its parent's
// mappings, read then if the parent is new, as perf names a child
// through its PERF_RECORD_FORK. An exec of pid (ObserveExec) undoes
// this. It costs a map insert; the table of parents is bounded
// (maxParents entries, emptied when full).
func (s *Symbolizer) ObserveFork(pid, parent uint32) {
	s.procs.observeFork(pid, parent)
}

// observeIPs is how many user IPs, from the leaf, ObserveStack checks
// against the known mappings.
const observeIPs = 16

// ObserveStack is Observe for a sample whose user stack is userIPs (leaf
// first): when pid is known and one of its first IPs lies in no mapping
// at all as last read (maps read at exec time lack the libraries the
// dynamic loader maps next), it re-reads /proc/PID/maps now
// (rate-limited per process, as Stack does: 5-100 ms apart), while the
// process likely still runs, rather than when Stack gets to the sample.
// It stops at the first IP in a mapping that is not executable (stack,
// heap: frame-pointer junk from there on), and at one below minCodeAddr. It costs a map lookup and a
// binary search per IP when there is nothing to do. It reports settled
// when every IP it checked lies in a known mapping (or, from the first
// that does not, in a mapping of data): then the same stack of the same
// process needs no check again until the process execs or exits, which
// callers may remember.
func (s *Symbolizer) ObserveStack(pid uint32, userIPs []uint64) (settled bool) {
	return s.procs.observeStack(pid, userIPs)
}

// Stats returns the counters so far.
func (s *Symbolizer) Stats() Stats {
	s.procs.mu.Lock()
	defer s.procs.mu.Unlock()
	st := s.stats
	st.Processes, st.Binaries = len(s.procs.m), s.bins.len()
	st.PerfMapLinesSkipped = s.procs.perfSkipped
	return st
}

// Forget drops the cache of process pid (its mappings and addresses), as
// when it exited; binaries stay cached. The next sample of pid reads its
// maps again.
func (s *Symbolizer) Forget(pid uint32) {
	s.procs.mu.Lock()
	defer s.procs.mu.Unlock()
	s.procs.forget(pid)
	s.sweepBinaries()
}

// Close cancels the debuginfod downloads under way or queued and waits
// for them to end (a few ms), drops every cache and closes the binaries
// held open (those opened when a process was first seen, not read yet),
// writes to the section cache (Options.CacheDir) what the binaries
// inflated of their DWARF and the lines it gave, and closes the KernelLookup (waiting for the kernel symbols' background
// open or load to end): its error is the only one Close returns. It is
// idempotent. The Symbolizer must not be used
// after Close, except to Close again.
func (s *Symbolizer) Close() error {
	s.fetch.Close() // before s.procs.mu: downloads never take it anyway
	s.stackMu.Lock()
	defer s.stackMu.Unlock()
	s.procs.mu.Lock()
	defer s.procs.mu.Unlock()
	s.bins.close()
	clear(s.procs.m)
	s.calls.close()
	s.vdso = nil
	return s.kernel.closeLookup()
}

// String summarizes unnamed frames by reason, e.g. "12 of 340 frames
// unnamed: no-symbol 10, process-gone 2"; it is "" when every frame was
// named.
func (s Stats) String() string {
	if s.Unnamed() == 0 {
		return ""
	}
	var parts []string
	for r := ReasonNone + 1; r < numReasons; r++ {
		if s.Frames[r] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", r, s.Frames[r]))
		}
	}
	return fmt.Sprintf("%d of %d frames unnamed: %s", s.Unnamed(), s.Unnamed()+s.Named(), strings.Join(parts, ", "))
}
