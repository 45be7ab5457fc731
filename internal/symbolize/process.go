package symbolize

import (
	"cmp"
	"errors"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"time"
)

// mapsRereadInterval is the least time between two reads of one process's
// maps after the first: an address in no known mapping (after exec or
// dlopen) triggers a re-read at most this often.
const mapsRereadInterval = 100 * time.Millisecond

// process is the cache of one process: its executable mappings and the
// addresses it has resolved.
type process struct {
	pid      uint32
	maps     []*procMapping // executable mappings, sorted by Start
	seen     bool           // maps were read successfully at least once
	unseen   Reason         // while !seen: ProcessGone, or NoAccess
	lastRead time.Time
	cache    map[uint64]frameInfo // by lookup address (address-1 for callers)
}

// procMapping is one executable line of the process's maps and what
// opening its file gave.
type procMapping struct {
	entry   MapsEntry
	opened  bool     // the file was tried (mapping, bin, reason are set)
	mapping *Mapping // shared by every frame in this mapping
	bin     *Binary  // nil when the file has no symbols to offer
	reason  Reason   // why bin is nil: NoSymbol, NoAccess or BadELF
	bias    uint64   // process address - ELF address
	biasOK  bool
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
// since its addresses may now mean other code. A failed read keeps the old
// mappings: a process that exited keeps its names.
func (s *Symbolizer) readMaps(p *process) bool {
	p.lastRead = s.now()
	f, err := os.Open(s.procPath(p.pid, "maps"))
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			p.unseen = ReasonNoAccess // another user's process, and we lack CAP_SYS_PTRACE
		}
		return false
	}
	entries, err := ParseMaps(f)
	f.Close()
	var syntax *MapsSyntaxError
	if err != nil && !errors.As(err, &syntax) {
		return false
	}
	old := make(map[MapsEntry]*procMapping, len(p.maps))
	for _, m := range p.maps {
		old[m.entry] = m
	}
	maps := make([]*procMapping, 0, len(p.maps))
	for _, e := range entries {
		if !e.Executable() {
			continue
		}
		m, ok := old[e]
		if !ok {
			m = &procMapping{entry: e}
		}
		delete(old, e)
		maps = append(maps, m)
	}
	slices.SortFunc(maps, func(a, b *procMapping) int {
		return cmp.Compare(a.entry.Start, b.entry.Start)
	})
	if len(old) > 0 {
		clear(p.cache)
	}
	p.maps, p.seen = maps, true
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

// resolveUser names the process address addr (already moved back by one
// for return addresses) in process p, through the caches.
func (s *Symbolizer) resolveUser(p *process, addr uint64) frameInfo {
	if fi, ok := p.cache[addr]; ok {
		return fi
	}
	m := p.find(addr)
	if m == nil && s.now().Sub(p.lastRead) >= mapsRereadInterval && s.readMaps(p) {
		m = p.find(addr)
	}
	switch {
	case m == nil && !p.seen:
		return frameInfo{reason: p.unseen} // not cached: retried later
	case m == nil:
		return frameInfo{reason: ReasonNoMapping}
	}
	fi := s.resolveIn(p, m, addr)
	p.cache[addr] = fi
	return fi
}

// resolveIn names addr in mapping m of process p, opening its file on
// first use, and finds its source lines.
func (s *Symbolizer) resolveIn(p *process, m *procMapping, addr uint64) frameInfo {
	if !m.opened {
		s.open(p, m)
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
	return fi
}
