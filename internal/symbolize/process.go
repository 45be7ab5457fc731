package symbolize

import (
	"cmp"
	"errors"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gprofile/gprofile/internal/symbolize/procmaps"

	"github.com/gprofile/gprofile/internal/symbolize/demangle"
	"github.com/gprofile/gprofile/internal/symbolize/elfio"
	"github.com/gprofile/gprofile/internal/symbolize/objfile"

	"golang.org/x/sys/unix"
)

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

// process is the cache of one process: its executable mappings and the
// addresses it has resolved.
type process struct {
	pid       uint32
	maps      []*procMapping // executable mappings, sorted by Start
	data      []addrSpan     // the other mappings ([stack], [heap], data), sorted
	seen      bool           // maps were read successfully at least once
	gone      bool           // seen, and then the maps could not be read: exited
	unseen    Reason         // while !seen: ProcessGone, or NoAccess
	lastRead  time.Time
	reread    time.Duration // least time from lastRead to the next read
	early     int           // re-reads left that skip the rate limit (earlyRereads)
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

// procPath returns <ProcRoot>/<pid>/<name>.
func (s *Symbolizer) procPath(pid uint32, name string) string {
	return s.procRoot + "/" + strconv.FormatUint(uint64(pid), 10) + "/" + name
}

// process returns the cache of pid, reading its maps on first sight.
func (s *Symbolizer) process(pid uint32) *process {
	if p, ok := s.procs[pid]; ok {
		return p
	}
	p := &process{pid: pid, unseen: ReasonProcessGone, cache: make(map[uint64]frameInfo)}
	s.procs[pid] = p
	s.readMaps(p)
	return p
}

// readMaps (re-)reads the executable mappings of p and reports whether it
// could. Mappings that did not change keep their *procMapping (and so
// their shared *Mapping); when one went away the address cache is dropped,
// since its addresses may now mean other code. The files of new mappings
// are opened at once (see prepare). A failed read keeps the old
// mappings: a process that exited keeps its names. It sets when the
// next read may come (see earlyRereads).
func (s *Symbolizer) readMaps(p *process) bool {
	p.lastRead = s.now()
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
	exe, _ := statID(s.procPath(p.pid, "exe"))
	f, err := os.Open(s.procPath(p.pid, "maps"))
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
	s.prepareAll(p, fresh)
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

// prepareAll opens the files of the mappings in fresh (see prepare),
// through one handle on p's root.
func (s *Symbolizer) prepareAll(p *process, fresh []*procMapping) {
	var root *elfio.Root
	for _, m := range fresh {
		if !isFilePath(m.entry.Path) || s.bins.has(keyOf(&m.entry)) {
			continue
		}
		if root == nil {
			r, err := elfio.OpenRoot(s.procPath(p.pid, "root"))
			if err != nil {
				return
			}
			root = r
			defer root.Close()
		}
		s.prepare(p, m, root)
	}
}

// checkExec re-reads p's maps when it has exec'd since they were read:
// /proc/PID/exe is another file. It checks at most every
// execCheckInterval unless force is set.
func (s *Symbolizer) checkExec(p *process, force bool) bool {
	if !p.seen || p.gone || p.exe == (fileID{}) {
		return false
	}
	now := s.now()
	if !force && now.Sub(p.lastCheck) < execCheckInterval {
		return false
	}
	p.lastCheck = now
	exe, err := statID(s.procPath(p.pid, "exe"))
	if err != nil || exe == p.exe {
		return false
	}
	return s.readMaps(p)
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

// resolveCached names the process address addr (already moved back by
// one for return addresses) in process p from what the process table
// holds: its address cache, JIT code through its perf map, or why it has
// no mapping (re-reading the maps first when addr is in none). When addr
// lies in a mapping of a file whose symbols must be looked up, it
// returns that mapping instead, for resolveIn. The caller holds s.mu.
func (s *Symbolizer) resolveCached(p *process, addr uint64) (frameInfo, *procMapping) {
	if fi, ok := p.cache[addr]; ok {
		return fi, nil
	}
	m := p.find(addr)
	if m == nil && addr >= minCodeAddr {
		reread := false
		if s.now().Sub(p.lastRead) >= p.reread {
			reread = s.readMaps(p)
		} else {
			reread = s.checkExec(p, true) // just exec'd: read the new image's maps now
		}
		if reread {
			m = p.find(addr)
		}
	}
	switch {
	case m == nil && !p.seen:
		return frameInfo{reason: p.unseen}, nil // not cached: retried later
	case m == nil, isJITMapping(m.entry.Path):
		return s.resolveJIT(p, m, addr), nil // not cached: JIT code changes
	}
	return frameInfo{}, m
}

// isJITMapping reports whether a mapping of this path may hold code that
// a JIT compiler made: anonymous memory, named ([anon:…]) or not, and
// memfd files; the perf map names it.
func isJITMapping(path string) bool {
	switch {
	case path == "", strings.HasPrefix(path, "[anon"), strings.HasPrefix(path, "/memfd:"):
		return true
	}
	return false
}

// resolveJIT names addr, in the anonymous mapping m or (m nil) in no
// mapping of p, from p's perf map.
func (s *Symbolizer) resolveJIT(p *process, m *procMapping, addr uint64) frameInfo {
	fi := frameInfo{reason: ReasonNoMapping}
	if m != nil {
		if !m.opened {
			s.openLocked(p.pid, m) // no file to read: s.mu stays held
		}
		fi = frameInfo{mapping: m.mapping, reason: ReasonNoSymbol}
	}
	pm := p.perf
	if pm == nil || pm.tab.Lookup(addr) == nil {
		pm = s.perfMapOf(p, true)
	} else {
		pm = s.perfMapOf(p, false)
	}
	sym := pm.tab.Lookup(addr)
	if sym == nil {
		return fi
	}
	if fi.mapping == nil {
		fi.mapping = pm.perfMapping()
	}
	fi.function, fi.systemName = demangle.Name(sym.Name), sym.Name
	fi.start, fi.reason = sym.Start, ReasonNone
	return fi
}

// resolveIn names addr in mapping m of process pid, opening its file on
// first use (reading the binary once, through the binary cache), and
// finds its source lines (a compilation unit's first lookup reads its
// DWARF). It runs on Stack's goroutine without s.mu: it touches only m's
// resolution fields, which only that goroutine uses, and the binary
// cache, which has its own lock.
func (s *Symbolizer) resolveIn(pid uint32, m *procMapping, addr uint64) frameInfo {
	if !m.opened {
		s.open(pid, m)
	}
	fi := frameInfo{mapping: m.mapping, reason: m.reason}
	if m.bin == nil {
		return fi
	}
	if !m.biasOK {
		fi.reason = ReasonNoSymbol
		return fi
	}
	fi.lines = m.bin.Lines(addr - m.bias)
	sym, ok := m.bin.Lookup(addr - m.bias)
	if !ok {
		fi.reason = ReasonNoSymbol
		return fi
	}
	fi.function, fi.systemName = sym.Function, sym.SystemName
	fi.start = sym.Start + m.bias
	fi.reason = ReasonNone
	if len(fi.lines) > 0 {
		if ls := m.bin.Lines(sym.Start); len(ls) > 0 { // the same unit: read already
			fi.startLine = ls[len(ls)-1].Line
		}
	}
	return fi
}
