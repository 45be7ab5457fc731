package symbolize

import (
	"bytes"
	"cmp"
	"container/heap"
	"io"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/gprofile/gprofile/internal/symbolize/elfio"
	"github.com/gprofile/gprofile/internal/symbolize/internal/textscan"
)

// Limits on perf maps (/tmp/perf-PID.map), which JIT compilers (V8 with
// --perf-basic-prof, the JVM with perf-map-agent, .NET, Python 3.12's
// -X perf) append a line to for each piece of code they make.
const (
	// maxPerfMapBytes caps how much of a perf map is read (bytes); the
	// rest is ignored.
	maxPerfMapBytes = 64 << 20
	// maxPerfMapLine caps one line (bytes); longer lines are skipped.
	maxPerfMapLine = 4 << 10
	// perfMapCheckInterval is the least time between two looks at
	// whether a process's perf map grew, made when an address in JIT code
	// is not in it.
	perfMapCheckInterval = 100 * time.Millisecond
	// perfMapRefresh is the least time between two such looks made when
	// addresses are found in it (newer code may have replaced the old).
	perfMapRefresh = time.Second
)

// PerfMapSymbol is one piece of JIT code named by a perf map line
// "START SIZE name" (START and SIZE in hex, with or without 0x; the name
// is the rest of the line and may hold spaces).
type PerfMapSymbol struct {
	Start, Size uint64 // address and size in bytes
	Name        string
}

// ParsePerfMap parses the text of a perf map. Lines that are malformed,
// have size 0, wrap around the address space, or are longer than 4 KiB
// are skipped and counted in skipped. The symbols come in file order.
func ParsePerfMap(data []byte) (syms []PerfMapSymbol, skipped int) {
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, textscan.Newline)
		if len(line) == 0 {
			continue
		}
		sym, ok := parsePerfMapLine(line)
		if !ok {
			skipped++
			continue
		}
		syms = append(syms, sym)
	}
	return syms, skipped
}

// parsePerfMapLine parses one line.
func parsePerfMapLine(line []byte) (PerfMapSymbol, bool) {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	if len(line) > maxPerfMapLine {
		return PerfMapSymbol{}, false
	}
	start, rest, ok := perfMapHex(line)
	if !ok {
		return PerfMapSymbol{}, false
	}
	size, rest, ok := perfMapHex(rest)
	if !ok || size == 0 || start+size < start {
		return PerfMapSymbol{}, false
	}
	name := bytes.TrimSpace(rest)
	if len(name) == 0 {
		return PerfMapSymbol{}, false
	}
	return PerfMapSymbol{Start: start, Size: size, Name: string(name)}, true
}

// perfMapHex parses a hex number (optionally 0x-prefixed) followed by a
// space or tab, and returns the rest after it.
func perfMapHex(b []byte) (uint64, []byte, bool) {
	b = bytes.TrimLeft(b, " \t")
	if len(b) > 2 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X') {
		b = b[2:]
	}
	n := 0
	for n < len(b) && b[n] != ' ' && b[n] != '\t' {
		n++
	}
	if n == 0 || n == len(b) || n > 16 {
		return 0, nil, false
	}
	v, err := strconv.ParseUint(string(b[:n]), 16, 64)
	if err != nil {
		return 0, nil, false
	}
	return v, b[n+1:], true
}

// perfSeg is an address range [start, end) that a perf map names.
type perfSeg struct {
	start, end uint64
	sym        int32 // index in perfMap.syms
}

// perfMap is what one process's perf map says, kept up to date as the
// file grows.
type perfMap struct {
	inner     string // the file's path inside the process's root, "" when not found
	syms      []PerfMapSymbol
	segs      []perfSeg // disjoint, sorted; later lines win where they overlap
	size      int64     // bytes read so far
	mtime     int64     // ns, of the file when last read
	lastCheck time.Time
	skipped   int
	mapping   *Mapping // for JIT addresses in no mapping; made on first use
	pid       uint32
}

// lookup returns the symbol that covers addr, or nil.
func (pm *perfMap) lookup(addr uint64) *PerfMapSymbol {
	i, found := slices.BinarySearchFunc(pm.segs, addr, func(s perfSeg, a uint64) int {
		switch {
		case s.end <= a:
			return -1
		case s.start > a:
			return 1
		}
		return 0
	})
	if !found {
		return nil
	}
	return &pm.syms[pm.segs[i].sym]
}

// add appends newly read symbols and recomputes the segments: where
// pieces of code overlap (a JIT reusing memory), the later line wins.
func (pm *perfMap) add(syms []PerfMapSymbol) {
	if len(syms) == 0 {
		return
	}
	pm.syms = append(pm.syms, syms...)
	pm.segs = paintSegments(pm.syms)
}

// paintSegments returns the disjoint ranges that syms cover, each
// labeled with the last symbol (in slice order) that covers it.
func paintSegments(syms []PerfMapSymbol) []perfSeg {
	order := make([]int32, len(syms))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return cmp.Compare(syms[a].Start, syms[b].Start) })
	segs := make([]perfSeg, 0, len(syms))
	var active symHeap // by index, latest on top
	active.syms = syms
	next := 0
	pos := uint64(0)
	for next < len(order) || active.Len() > 0 {
		// Drop symbols that end at or before pos.
		for active.Len() > 0 && symEnd(syms, active.idx[0]) <= pos {
			heap.Pop(&active)
		}
		if active.Len() == 0 {
			if next == len(order) {
				break
			}
			pos = syms[order[next]].Start
		}
		for next < len(order) && syms[order[next]].Start <= pos {
			heap.Push(&active, order[next])
			next++
		}
		for active.Len() > 0 && symEnd(syms, active.idx[0]) <= pos {
			heap.Pop(&active)
		}
		if active.Len() == 0 {
			continue
		}
		top := active.idx[0]
		end := symEnd(syms, top)
		if next < len(order) {
			end = min(end, syms[order[next]].Start)
		}
		if n := len(segs); n > 0 && segs[n-1].sym == top && segs[n-1].end == pos {
			segs[n-1].end = end
		} else {
			segs = append(segs, perfSeg{start: pos, end: end, sym: top})
		}
		pos = end
	}
	return segs
}

// symEnd returns the end of syms[i], saturated.
func symEnd(syms []PerfMapSymbol, i int32) uint64 {
	s := &syms[i]
	if s.Start+s.Size < s.Start {
		return math.MaxUint64
	}
	return s.Start + s.Size
}

// symHeap is a max-heap of symbol indexes: the latest line on top.
type symHeap struct {
	idx  []int32
	syms []PerfMapSymbol
}

func (h *symHeap) Len() int           { return len(h.idx) }
func (h *symHeap) Less(i, j int) bool { return h.idx[i] > h.idx[j] }
func (h *symHeap) Swap(i, j int)      { h.idx[i], h.idx[j] = h.idx[j], h.idx[i] }
func (h *symHeap) Push(x any)         { h.idx = append(h.idx, x.(int32)) }
func (h *symHeap) Pop() any {
	x := h.idx[len(h.idx)-1]
	h.idx = h.idx[:len(h.idx)-1]
	return x
}

// perfMapOf returns p's perf map, reading it or what was appended to it
// when due: on the first call, then at most every perfMapCheckInterval
// when the caller missed (found is false), else every perfMapRefresh.
func (s *Symbolizer) perfMapOf(p *process, missed bool) *perfMap {
	pm := p.perf
	now := s.now()
	if pm == nil {
		pm = &perfMap{pid: p.pid}
		p.perf = pm
	} else {
		wait := perfMapRefresh
		if missed {
			wait = perfMapCheckInterval
		}
		if now.Sub(pm.lastCheck) < wait {
			return pm
		}
	}
	pm.lastCheck = now
	s.refreshPerfMap(p, pm)
	return pm
}

// refreshPerfMap reads what was appended to the perf map since the last
// read, or all of it when it shrank or was replaced: through the
// process's root, at /tmp/perf-PID.map with the host PID, else with
// the PID the process has in its own PID namespace (NSpid).
func (s *Symbolizer) refreshPerfMap(p *process, pm *perfMap) {
	root, err := elfio.OpenRoot(s.procPath(p.pid, "root"))
	if err != nil {
		return // exited: keep what was read
	}
	defer root.Close()
	names := []string{pm.inner}
	if pm.inner == "" {
		names = []string{perfMapName(p.pid)}
		if ns := s.nsPID(p.pid); ns != 0 && ns != p.pid {
			names = append(names, perfMapName(ns))
		}
	}
	for _, name := range names {
		f, err := root.Open(name, math.MaxInt64)
		if err != nil {
			continue
		}
		pm.inner = name
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return
		}
		size, mtime := st.Size(), st.ModTime().UnixNano()
		if size == pm.size && mtime == pm.mtime {
			return
		}
		if size < pm.size { // rewritten: start over
			pm.syms, pm.segs, pm.size, pm.skipped = nil, nil, 0, 0
		}
		pm.mtime = mtime
		s.readPerfMapTail(pm, f, min(size, maxPerfMapBytes))
		return
	}
}

// readPerfMapTail reads the complete lines of f between pm.size and
// limit (bytes) and adds their symbols.
func (s *Symbolizer) readPerfMapTail(pm *perfMap, f io.ReaderAt, limit int64) {
	if limit <= pm.size {
		return
	}
	buf := make([]byte, limit-pm.size)
	n, err := f.ReadAt(buf, pm.size)
	if err != nil && err != io.EOF {
		return
	}
	buf = buf[:n]
	last := bytes.LastIndexByte(buf, '\n')
	if last < 0 {
		if limit == maxPerfMapBytes || int64(len(buf)) > maxPerfMapLine {
			pm.size += int64(len(buf)) // a giant last line: skip it
			pm.skipped++
		}
		return // an unfinished line: read it once it is whole
	}
	syms, skipped := ParsePerfMap(buf[:last+1])
	pm.size += int64(last + 1)
	pm.skipped += skipped
	s.stats.PerfMapLinesSkipped += uint64(skipped)
	pm.add(syms)
}

// perfMapName returns /tmp/perf-PID.map.
func perfMapName(pid uint32) string {
	return "/tmp/perf-" + strconv.FormatUint(uint64(pid), 10) + ".map"
}

// nsPID returns the PID that process pid has in its own PID namespace,
// the last NSpid value of <ProcRoot>/PID/status; 0 when unknown.
func (s *Symbolizer) nsPID(pid uint32) uint32 {
	f, err := elfio.OpenRegular(s.procPath(pid, "status"), math.MaxInt64)
	if err != nil {
		// procfs files are regular files; this fails only when it is gone.
		return 0
	}
	defer f.Close()
	data, _ := textscan.ReadAll(io.LimitReader(f, 64<<10), 4096)
	for line := range bytes.SplitSeq(data, []byte{'\n'}) {
		if rest, ok := bytes.CutPrefix(line, []byte("NSpid:")); ok {
			fields := bytes.Fields(rest)
			if len(fields) == 0 {
				return 0
			}
			v, err := strconv.ParseUint(string(fields[len(fields)-1]), 10, 32)
			if err != nil {
				return 0
			}
			return uint32(v)
		}
	}
	return 0
}

// perfMapping returns the Mapping of frames that pm names outside every
// mapping of the process: "[perf-PID.map]", spanning the address space
// (the JIT's code may be anywhere).
func (pm *perfMap) perfMapping() *Mapping {
	if pm.mapping == nil {
		pm.mapping = &Mapping{Path: "[perf-" + strconv.FormatUint(uint64(pm.pid), 10) + ".map]", Limit: math.MaxUint64}
	}
	return pm.mapping
}
