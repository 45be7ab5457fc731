package symbolize

import (
	"strings"

	"github.com/gprofile/gprofile/internal/symbolize/demangle"
)

// resolveCached names the process address addr (already moved back by
// one for return addresses) in process p from what the process table
// holds: its address cache, JIT code through its perf map, or why it has
// no mapping (re-reading the maps first when addr is in none). When addr
// lies in a mapping of a file whose symbols must be looked up, it
// returns that mapping instead, for resolveIn. The caller holds s.procs.mu.
func (s *Symbolizer) resolveCached(p *process, addr uint64) (frameInfo, *procMapping) {
	if fi, ok := p.cache[addr]; ok {
		return fi, nil
	}
	m := p.find(addr)
	if m == nil && addr >= minCodeAddr {
		reread := false
		if s.procs.now().Sub(p.lastRead) >= p.reread {
			reread = s.procs.readMaps(p)
		} else {
			reread = s.procs.checkExec(p, true) // just exec'd: read the new image's maps now
		}
		if reread {
			m = p.find(addr)
		}
	}
	switch {
	case m == nil && !p.seen:
		return frameInfo{reason: p.unseen}, nil // not cached: retried later
	case m == nil, isJITMapping(m.entry.Path) && !s.memfdProgram(p, m):
		return s.resolveJIT(p, m, addr), nil // not cached: JIT code changes
	}
	return frameInfo{}, m
}

// memfdProgram reports whether m is a memfd file that holds an ELF
// program (isMemfd), opening it on first use (openLocked, which releases
// s.procs.mu while it reads the file); false for any other mapping.
func (s *Symbolizer) memfdProgram(p *process, m *procMapping) bool {
	if !isMemfd(m.entry.Path) {
		return false
	}
	if !m.opened {
		s.openLocked(p.pid, m)
	}
	return m.bin != nil
}

// isJITMapping reports whether a mapping of this path may hold code that
// a JIT compiler made: anonymous memory, named ([anon:…]) or not, and
// memfd files that hold no ELF program (memfdProgram); the perf map
// names it.
func isJITMapping(path string) bool {
	switch {
	case path == "", strings.HasPrefix(path, "[anon"), isMemfd(path):
		return true
	}
	return false
}

// JIT reports whether m (nil: false) is memory a JIT compiler may fill:
// anonymous, named ([anon:…]) or not, or a memfd file that holds no ELF
// program (isJITMapping), whose code a perf map names, possibly only
// after it first runs.
func (m *Mapping) JIT() bool { return m != nil && !m.program && isJITMapping(m.Path) }

// resolveJIT names addr, in the anonymous mapping m or (m nil) in no
// mapping of p, from p's perf map.
func (s *Symbolizer) resolveJIT(p *process, m *procMapping, addr uint64) frameInfo {
	fi := frameInfo{reason: ReasonNoMapping}
	if m != nil {
		if !m.opened {
			s.openLocked(p.pid, m) // no file to read: s.procs.mu stays held
		}
		fi = frameInfo{mapping: m.mapping, reason: ReasonNoSymbol}
	}
	pm := p.perf
	if pm == nil || pm.tab.Lookup(addr) == nil {
		pm = s.procs.perfMapOf(p, true)
	} else {
		pm = s.procs.perfMapOf(p, false)
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
// DWARF). It runs on Stack's goroutine without s.procs.mu: it touches only m's
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
