package symbolize

import (
	"cmp"
	"errors"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gprofile/gprofile/internal/symbolize/objfile"
	"github.com/gprofile/gprofile/internal/symbolize/procmaps"

	"golang.org/x/sys/unix"
)

// procTable is the process table: one entry per process (its mappings
// from /proc/PID/maps, exec checks, its perf map and its address cache),
// under one lock. The reader goroutine uses it through Observe,
// ObserveExec, ObserveStack and CodeAt; Stack looks addresses up in it
// and releases the lock while binaries are read (the binary cache has
// its own lock).
type procTable struct {
	// mu guards m, parents, every process in m (and each procMapping's
	// resolution fields: see procMapping.set), perfSkipped, and the
	// Symbolizer's stats, which Stack counts while it holds mu.
	mu          sync.Mutex
	m           map[uint32]*process
	root        string // ProcRoot
	perfSkipped uint64 // perf map lines skipped (Stats.PerfMapLinesSkipped)
	// prepare opens the files of mappings just found in p's maps, in
	// the binary cache (Symbolizer.prepareAll), with mu held.
	prepare func(p *process, fresh []*procMapping)
	now     func() time.Time // time.Now; tests replace it
	// parents holds the process that forked each process reported by
	// ObserveFork and not yet seen: one whose maps cannot be read on
	// first sight (it exited) takes its parent's mappings. At most
	// maxParents entries.
	parents map[uint32]uint32
	// settle is when, after an exec'd program's first maps read, its maps
	// are read again unasked (settleDelays; nil: never, as in tests that
	// replace now).
	settle []time.Duration
	// execsDelivered, when not nil, says exec records arrive and whether
	// none was lost (SetExecsReported); execsLost is what it said at
	// lostCheck, once it said false (it stays so).
	execsDelivered func() bool
	execsLost      bool
	lostCheck      time.Time
}

// settleDelays are the times after an exec'd program's first maps read
// (ObserveExec, or an exec found by checkExec) at which its maps are read
// again whether or not a sample asks, while it lives and runs that
// program; a process first seen running has its libraries mapped already
// (and whole-system runs see thousands: their reads would hold the lock
// the reader only tries). The dynamic loader
// maps the libraries after the exec is reported, and a process that runs
// briefly (a burst of probe hits, say) may exit before its samples leave
// the ring buffer: read then, its maps are gone, and the samples would
// have no libraries to unwind or name through. That is four reads of
// /proc/PID/maps per exec, as perf's mmap records are a few per exec.
var settleDelays = []time.Duration{2 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond, 250 * time.Millisecond}

// init makes t an empty table of the processes under procRoot whose
// new mappings prepare opens.
func (t *procTable) init(procRoot string, prepare func(*process, []*procMapping)) {
	t.m, t.root, t.prepare, t.now = make(map[uint32]*process), procRoot, prepare, time.Now
	t.parents = make(map[uint32]uint32)
	t.settle = settleDelays
}

// scheduleSettle reads p's maps again at each of t.settle after now, on
// timers, while p is in the table, lives and has not exec'd again (a new
// program schedules its own). The caller holds t.mu.
func (t *procTable) scheduleSettle(p *process) {
	if len(t.settle) == 0 {
		return
	}
	p.settleGen++
	gen := p.settleGen
	var at func(i int, prev time.Duration)
	at = func(i int, prev time.Duration) {
		time.AfterFunc(t.settle[i]-prev, func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			if t.m[p.pid] != p || p.gone || p.settleGen != gen {
				return
			}
			early := p.early
			t.readMaps(p)
			// Unasked reads leave the early re-reads to the samples.
			if p.early = early; p.early > 0 {
				p.reread = 0
			}
			if i+1 < len(t.settle) && !p.gone {
				at(i+1, t.settle[i])
			}
		})
	}
	at(0, 0)
}

// maxParents bounds procTable.parents: a whole-system run hears of every
// fork, and most children are never sampled (or exec, which drops their
// entry). When full, the table is emptied: a child forked before that
// and seen only after it exited goes unnamed, as without fork records.
const maxParents = 1 << 14

// observeFork is ObserveFork.
func (t *procTable) observeFork(pid, parent uint32) {
	if pid == parent || pid == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.parents) >= maxParents {
		clear(t.parents)
	}
	t.parents[pid] = parent
}

// inherit gives p, a process that exited before its maps were first
// read, the mappings of the process that forked it (t.parents), read now
// if the parent is new: a fork copies the parent's address space, and
// a child that has not exec'd (which drops its t.parents entry) still
// runs the same program. It reports whether p got them. The caller
// holds t.mu.
func (t *procTable) inherit(p *process) bool {
	parent, ok := t.parents[p.pid]
	if !ok {
		return false
	}
	delete(t.parents, p.pid) // before t.process: ends a cycle of reused pids
	pp := t.m[parent]
	if pp == nil {
		pp = t.process(parent)
	}
	if !pp.seen {
		return false
	}
	p.maps, p.data, p.exe = slices.Clone(pp.maps), slices.Clone(pp.data), pp.exe
	p.seen, p.gone, p.inherited = true, true, true
	return true
}

// observeExec is ObserveExec.
func (t *procTable) observeExec(pid uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.parents, pid) // a new program: the parent's mappings are not its own
	if p, ok := t.m[pid]; ok && p.inherited {
		delete(t.m, pid) // read the new program's maps, as for a new process
	} else if ok {
		if !t.checkExec(p, true) && p.seen && !p.gone && t.readMaps(p) {
			// Its maps were read after the exec already (for a sample
			// taken before it, ring order): maybe before the dynamic
			// loader mapped the libraries. Read them now and settle
			// as after any exec.
			t.scheduleSettle(p)
		}
		return
	}
	if p := t.process(pid); p.seen {
		t.scheduleSettle(p)
	}
}

// observeStack is ObserveStack.
func (t *procTable) observeStack(pid uint32, userIPs []uint64) (settled bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.m[pid]
	if !ok {
		t.process(pid)
		return false
	}
	if t.checkExec(p, false) || !p.seen || p.gone {
		return false
	}
	for i, ip := range userIPs[:min(len(userIPs), observeIPs)] {
		addr := lookupAddr(i, ip)
		if addr < minCodeAddr {
			return true // the 0 that ends many stacks: no mapping can hold it
		}
		if p.find(addr) != nil {
			continue
		}
		if p.inData(addr) {
			return true
		}
		if t.now().Sub(p.lastRead) >= p.reread {
			t.readMaps(p)
		}
		return false
	}
	return true
}

// forget drops process pid. The caller holds t.mu.
func (t *procTable) forget(pid uint32) {
	delete(t.m, pid)
	delete(t.parents, pid)
}

// usedBinaries returns the binaries that some process in the table maps.
// The caller holds t.mu.
func (t *procTable) usedBinaries() map[binKey]bool {
	used := make(map[binKey]bool)
	for _, p := range t.m {
		for _, m := range p.maps {
			used[keyOf(&m.entry)] = true
		}
	}
	return used
}

// An address in no known mapping (after dlopen, or a garbage return
// address from code without frame pointers) makes the process's maps be
// read again, unless they were read less than 40 times as long as the
// last read (and parse) took ago, bounded by minMapsReread and
// mapsRereadInterval: re-reads cost at most about 2.5% of a CPU per
// process, and a library that dlopen just mapped is seen within a few
// ms. An exec is seen at once (see checkExec).
//
// The first earlyRereads re-reads after the maps first show a program
// (first sight, or exec) are not rate-limited: that read comes as soon as
// the exec is reported, before the dynamic loader has mapped the
// libraries (a few hundred µs later), and a sample of main has libc
// below it from the start; a process that lives 300 ms would otherwise
// have its first 5-100 ms of libc frames unnamed when its samples are
// symbolized as they arrive. Addresses below minCodeAddr never re-read.
const (
	minMapsReread      = 5 * time.Millisecond
	mapsRereadInterval = 100 * time.Millisecond
	mapsRereadFactor   = 40
	earlyRereads       = 4
)

// minCodeAddr is the lowest address that may hold a mapping (the
// kernel's vm.mmap_min_addr is at least a page): a return address below
// it, such as the 0 that ends many stacks, is in no mapping whatever
// the maps say, and re-reading them for it would be a waste.
const minCodeAddr = 4096

// execCheckInterval is the least time between two checks of whether a
// process has exec'd (a stat of /proc/PID/exe), made when it has a
// stack to symbolize.
const execCheckInterval = 10 * time.Millisecond

// execBackstopInterval replaces execCheckInterval when exec records
// arrive and one was lost (SetExecsReported): the check then only
// catches an exec whose record was lost. It is also how often the
// symbolizer asks whether one was.
const execBackstopInterval = time.Second

// process is the cache of one process: its executable mappings and the
// addresses it has resolved.
type process struct {
	pid       uint32
	maps      []*procMapping // executable mappings, sorted by Start
	data      []addrSpan     // the other mappings ([stack], [heap], data), sorted
	seen      bool           // maps were read successfully at least once
	gone      bool           // seen, and then the maps could not be read: exited
	inherited bool           // maps are the parent's (inherit): never read for this pid
	unseen    Reason         // while !seen: ProcessGone, or NoAccess
	lastRead  time.Time
	reread    time.Duration // least time from lastRead to the next read
	early     int           // re-reads left that skip the rate limit (earlyRereads)
	settleGen int           // bumped per new program: its settle reads (scheduleSettle)
	exe       fileID        // /proc/PID/exe when the maps were last read
	lastCheck time.Time
	cache     map[uint64]frameInfo // by lookup address (address-1 for callers)
	perf      *perfMap             // /tmp/perf-PID.map, once looked for
}

// fileID identifies a file by device and inode; zero when unknown.
type fileID struct{ dev, ino uint64 }

// statID returns the fileID of the file at path (following links).
func statID(path string) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}, err
	}
	return fileID{st.Dev, st.Ino}, nil
}

// procMapping is one executable line of the process's maps and what
// opening its file gave.
type procMapping struct {
	entry   procmaps.Entry
	opened  bool            // the file was tried (mapping, bin, reason are set)
	mapping *Mapping        // shared by every frame in this mapping
	bin     *objfile.Binary // nil when the file has no symbols to offer
	reason  Reason          // why bin is nil: NoSymbol, NoAccess or BadELF
	bias    uint64          // process address - ELF address
	biasOK  bool
	code    *CodeObject // for CodeAt, once asked
}

// path returns <ProcRoot>/<pid>/<name>.
func (t *procTable) path(pid uint32, name string) string {
	return t.root + "/" + strconv.FormatUint(uint64(pid), 10) + "/" + name
}

// process returns the cache of pid, reading its maps on first sight.
// The caller holds t.mu.
func (t *procTable) process(pid uint32) *process {
	if p, ok := t.m[pid]; ok {
		return p
	}
	p := &process{pid: pid, unseen: ReasonProcessGone, cache: make(map[uint64]frameInfo)}
	t.m[pid] = p
	if !t.readMaps(p) && p.unseen == ReasonProcessGone {
		t.inherit(p)
	}
	delete(t.parents, pid)
	return p
}

// readMaps (re-)reads the executable mappings of p and reports whether it
// could. Mappings that did not change keep their *procMapping (and so
// their shared *Mapping); when one went away the address cache is dropped,
// since its addresses may now mean other code. The files of new mappings
// are opened at once (t.prepare). The caller holds t.mu. A failed read keeps the old
// mappings: a process that exited keeps its names. It sets when the
// next read may come (see earlyRereads).
func (t *procTable) readMaps(p *process) bool {
	p.lastRead = t.now()
	p.lastCheck = p.lastRead
	start := time.Now()
	var took time.Duration // reading and parsing: what a re-read costs
	defer func() {
		if took == 0 {
			took = time.Since(start)
		}
		p.reread = min(max(mapsRereadFactor*took, minMapsReread), mapsRereadInterval)
		if p.early > 0 {
			p.reread = 0
		}
	}()
	exe, _ := statID(t.path(p.pid, "exe"))
	f, err := os.Open(t.path(p.pid, "maps"))
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			p.unseen = ReasonNoAccess // another user's process, and we lack CAP_SYS_PTRACE
		}
		p.gone = p.seen && !errors.Is(err, fs.ErrPermission)
		p.early = 0
		return false
	}
	entries, err := procmaps.Parse(f)
	f.Close()
	took = time.Since(start) // opening new files (prepareAll) is paid once
	var syntax *procmaps.SyntaxError
	if err != nil && !errors.As(err, &syntax) {
		p.early = 0
		return false
	}
	if len(entries) == 0 && p.seen {
		p.gone = true // a zombie, or a process that exited while we read
		p.early = 0
		return false
	}
	newImage := len(p.maps) == 0 || exe != p.exe && exe != (fileID{})
	p.exe = exe
	old := make(map[procmaps.Entry]*procMapping, len(p.maps))
	for _, m := range p.maps {
		old[m.entry] = m
	}
	maps := make([]*procMapping, 0, len(p.maps))
	var fresh []*procMapping
	data := p.data[:0]
	for _, e := range entries {
		if !e.Executable() {
			data = append(data, addrSpan{e.Start, e.Limit})
			continue
		}
		m, ok := old[e]
		if !ok {
			m = &procMapping{entry: e}
			fresh = append(fresh, m)
		}
		delete(old, e)
		maps = append(maps, m)
	}
	t.prepare(p, fresh)
	slices.SortFunc(maps, func(a, b *procMapping) int {
		return cmp.Compare(a.entry.Start, b.entry.Start)
	})
	if len(old) > 0 {
		clear(p.cache)
	}
	slices.SortFunc(data, func(a, b addrSpan) int { return cmp.Compare(a.start, b.start) })
	switch {
	case newImage && len(maps) > 0:
		p.early = earlyRereads // the loader is about to map the libraries
	case p.early > 0:
		p.early--
	}
	p.maps, p.data, p.seen, p.gone = maps, data, true, false
	return true
}

// addrSpan is an address range [start, limit).
type addrSpan struct{ start, limit uint64 }

// inData reports whether addr lies in one of p's mappings that are not
// executable (as last read): the stack, the heap, data. No instruction
// is there, so an address there in a user stack is frame-pointer junk.
func (p *process) inData(addr uint64) bool {
	i, _ := slices.BinarySearchFunc(p.data, addr, func(r addrSpan, a uint64) int {
		if r.start > a {
			return 1
		}
		return -1
	})
	return i > 0 && addr < p.data[i-1].limit
}

// checkExec re-reads p's maps when it has exec'd since they were read:
// /proc/PID/exe is another file. It checks at most every
// execCheckInterval (execBackstopInterval when exec records arrive)
// unless force is set. The caller holds t.mu.
func (t *procTable) checkExec(p *process, force bool) bool {
	if !p.seen || p.gone || p.exe == (fileID{}) {
		return false
	}
	now := t.now()
	every := execCheckInterval
	if t.execsDelivered != nil {
		every = execBackstopInterval
		if !t.execsLost && now.Sub(t.lostCheck) >= execBackstopInterval {
			t.lostCheck, t.execsLost = now, !t.execsDelivered()
		}
		if !force && !t.execsLost {
			return false // every exec so far came as a record
		}
	}
	if !force && now.Sub(p.lastCheck) < every {
		return false
	}
	p.lastCheck = now
	exe, err := statID(t.path(p.pid, "exe"))
	if err != nil || exe == p.exe {
		return false
	}
	if !t.readMaps(p) {
		return false
	}
	t.scheduleSettle(p)
	return true
}

// find returns the mapping holding addr, or nil.
func (p *process) find(addr uint64) *procMapping {
	i, _ := slices.BinarySearchFunc(p.maps, addr, func(m *procMapping, a uint64) int {
		if m.entry.Start > a {
			return 1
		}
		return -1
	})
	if i > 0 && addr < p.maps[i-1].entry.Limit {
		return p.maps[i-1]
	}
	return nil
}
