package symbolize

import (
	"errors"
	"os"
	"sync"
	"time"

	"github.com/gprofile/gprofile/internal/symbolize/debuginfo"
	"github.com/gprofile/gprofile/internal/symbolize/elfio"
	"github.com/gprofile/gprofile/internal/symbolize/objfile"
	"github.com/gprofile/gprofile/internal/symbolize/procmaps"
)

// sweepEvery is the least time between two sweeps of the binary cache.
const sweepEvery = 10 * time.Second

// loadBinary reads a binary for the cache; tests replace it.
var loadBinary = objfile.Load

// binCache holds one entry per binary, shared by every process that maps
// it. Its lock guards the map and the count of files held open; an entry
// is read (objfile.Load) once, through its own once, with no lock held,
// so that a large binary being read holds up neither the reader
// goroutine (Observe, which opens files through prepare) nor anything
// else.
type binCache struct {
	mu        sync.Mutex
	m         map[binKey]*binEntry
	pending   int // entries with their file open, not read yet
	lastSweep time.Time
}

// binEntry is a binary in the cache: opened (file set) and waiting for
// its first lookup, then read: the Binary, or ReasonBadELF (a property of
// the file). Open failures are not cached, since another process may be
// able to open the same file. file and opts are set before the entry is
// shared; bin, reason and buildID are written by read, inside once.
type binEntry struct {
	once     sync.Once
	file     *os.File          // open, not read yet; nil once read (guarded by binCache.mu)
	opts     debuginfo.Options // how to read it (its root is closed once read)
	fallback *objfile.Binary   // a reload's earlier reading, kept if this one fails
	users    int               // lookups under way (guarded by binCache.mu): not swept
	bin      *objfile.Binary
	reason   Reason
	buildID  string // of a file that is not usable ELF, if its notes say
	stale    bool   // bin lacks a debug file debuginfod has since sent (Stack's goroutine only)
}

// has reports whether key has an entry, or no more files may be held
// open (then prepare opens nothing).
func (c *binCache) has(key binKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.m[key]
	return ok || c.pending >= maxPendingFiles
}

// add adds be, whose file is open, under key unless key has an entry
// already (a lookup added it meanwhile): then be is released and the
// entry returned. The entry returned is held (users) until done.
func (c *binCache) add(key binKey, be *binEntry) *binEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.m[key]; ok {
		c.pending++
		c.releaseLocked(be)
		old.users++
		return old
	}
	c.m[key] = be
	c.pending++
	be.users++
	return be
}

// get returns the entry of key, held until done, or nil.
func (c *binCache) get(key binKey) *binEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	be := c.m[key]
	if be != nil {
		be.users++
	}
	return be
}

// replace puts be, a new reading of a stale entry's file, in its place.
func (c *binCache) replace(key binKey, old, be *binEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[key] == old {
		c.m[key] = be
	}
	c.pending++
	old.users--
	be.users++
}

// done ends a lookup of be that get, add or replace began.
func (c *binCache) done(be *binEntry) {
	c.mu.Lock()
	be.users--
	c.mu.Unlock()
}

// read reads be's file once and closes it, with no lock held but the
// cache's for the bookkeeping at the end.
func (c *binCache) read(be *binEntry) {
	be.once.Do(func() {
		b, err := loadBinary(be.file, be.opts)
		var id string
		if err != nil && errors.Is(err, objfile.ErrBadELF) {
			id = fileBuildID(be.file)
		}
		c.mu.Lock()
		c.releaseLocked(be)
		c.mu.Unlock()
		be.buildID = id
		switch {
		case err == nil:
			be.bin = b
		case be.fallback != nil:
			be.bin = be.fallback // read again (see reload) and failed: keep the first reading
		case errors.Is(err, objfile.ErrBadELF):
			be.reason = ReasonBadELF
		default:
			be.reason = ReasonNoAccess
		}
	})
}

// releaseLocked closes be's file and root. The caller holds c.mu.
func (c *binCache) releaseLocked(be *binEntry) {
	if be.file == nil {
		return
	}
	be.file.Close()
	be.opts.Root.Close()
	be.file, be.opts.Root = nil, nil
	c.pending--
}

// sweep drops the entries not in used and not being looked up, at most
// once every sweepEvery (now is the time), so that a long run over many
// short-lived programs does not keep every binary's symbols and DWARF. A
// binary mapped again later is read again.
func (c *binCache) sweep(now time.Time, used map[binKey]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(c.lastSweep) < sweepEvery {
		return
	}
	c.lastSweep = now
	for key, be := range c.m {
		if !used[key] && be.users == 0 {
			c.releaseLocked(be)
			if be.bin != nil {
				be.bin.SaveCache() // what it inflated and answered: the binary may run again
			}
			delete(c.m, key)
		}
	}
}

// each calls f on every entry, under the cache's lock.
func (c *binCache) each(f func(*binEntry)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, be := range c.m {
		f(be)
	}
}

// close releases every entry and empties the cache; read entries write
// what they inflated to the section cache.
func (c *binCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, be := range c.m {
		c.releaseLocked(be)
		if be.bin != nil {
			be.bin.SaveCache()
		}
	}
	clear(c.m)
}

// len returns the number of entries.
func (c *binCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// prepareAll opens the files of the mappings in fresh (see prepare),
// through one handle on p's root. It is the process table's prepare:
// the caller holds s.procs.mu.
func (s *Symbolizer) prepareAll(p *process, fresh []*procMapping) {
	var root *elfio.Root
	for _, m := range fresh {
		if !isFilePath(m.entry.Path) || s.bins.has(keyOf(&m.entry)) {
			continue
		}
		if root == nil {
			r, err := elfio.OpenRoot(s.procs.path(p.pid, "root"))
			if err != nil {
				return
			}
			root = r
			defer root.Close()
		}
		s.prepare(p, m, root)
	}
}

// prepare opens the file of a mapping just found in p's maps, through
// root (p's root, or nil), unless it is cached already or too many files
// are open: so that the binary can still be read when the process has
// exited or the file was deleted by the time its addresses are looked up.
func (s *Symbolizer) prepare(p *process, m *procMapping, root *elfio.Root) {
	e := &m.entry
	key := keyOf(e)
	if !isFilePath(e.Path) || s.bins.has(key) {
		return
	}
	f, opts, err := s.openMapped(p.pid, e, root)
	if err != nil {
		return // tried again at the first lookup, while the process lives
	}
	s.bins.done(s.bins.add(key, &binEntry{file: f, opts: opts}))
}

// binary returns the Binary of the file behind e, from the cache (read
// now, once, if it was only opened) or read through process pid's view
// of the file system. It runs on Stack's goroutine without s.procs.mu.
func (s *Symbolizer) binary(pid uint32, e *procmaps.Entry) (*objfile.Binary, Reason) {
	key := keyOf(e)
	be := s.bins.get(key)
	if be == nil {
		f, opts, err := s.openMapped(pid, e, nil)
		if err != nil {
			return nil, ReasonNoAccess
		}
		be = s.bins.add(key, &binEntry{file: f, opts: opts})
	}
	if be.stale {
		be = s.reload(pid, e, key, be)
	}
	s.bins.read(be)
	s.bins.done(be)
	return be.bin, be.reason
}

// reload opens the file of the stale entry be again, through process
// pid, and returns a new entry to read it with the debug file that has
// arrived since; if the file cannot be opened now (the process exited,
// say), be keeps its Binary without the debug file.
func (s *Symbolizer) reload(pid uint32, e *procmaps.Entry, key binKey, be *binEntry) *binEntry {
	be.stale = false
	f, opts, err := s.openMapped(pid, e, nil)
	if err != nil {
		return be
	}
	fresh := &binEntry{file: f, opts: opts, fallback: be.bin}
	s.bins.replace(key, be, fresh)
	return fresh
}

// buildIDOf returns the build ID the cache holds for the file of e when
// it is not usable ELF (see fileBuildID), else "".
func (s *Symbolizer) buildIDOf(e *procmaps.Entry) string {
	if be := s.bins.get(keyOf(e)); be != nil {
		defer s.bins.done(be)
		return be.buildID
	}
	return ""
}

// sweepBinaries drops the binaries that no cached process maps any more
// (their processes were forgotten); see binCache.sweep. The caller holds
// s.procs.mu.
func (s *Symbolizer) sweepBinaries() {
	s.bins.sweep(s.procs.now(), s.procs.usedBinaries())
}
