package symbolize

import (
	"bytes"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/gprofile/gprofile/internal/symbolize/elfio"
	"github.com/gprofile/gprofile/internal/symbolize/internal/textscan"
	"github.com/gprofile/gprofile/internal/symbolize/perfmap"
)

// Limits on perf maps (/tmp/perf-PID.map), which JIT compilers (V8 with
// --perf-basic-prof, the JVM with perf-map-agent, .NET, Python 3.12's
// -X perf) append a line to for each piece of code they make.
const (
	// maxPerfMapBytes caps how much of a perf map is read (bytes); the
	// rest is ignored.
	maxPerfMapBytes = 64 << 20
	// perfMapCheckInterval is the least time between two looks at
	// whether a process's perf map grew, made when an address in JIT code
	// is not in it.
	perfMapCheckInterval = 100 * time.Millisecond
	// perfMapRefresh is the least time between two such looks made when
	// addresses are found in it (newer code may have replaced the old).
	perfMapRefresh = time.Second
	// perfMapAbsentMax bounds the time between two looks for a perf map
	// that was not there: the wait doubles from perfMapCheckInterval at
	// each look that finds none. JIT compilers create the file as they
	// start, so a process whose executable memory has no perf map for
	// long (code in a memfd, a JIT that writes none) most likely never
	// gets one, and each look is an open through its root.
	perfMapAbsentMax = 5 * time.Second
)

// perfMap is what one process's perf map says, kept up to date as the
// file grows.
type perfMap struct {
	inner     string // the file's path inside the process's root, "" when not found
	tab       perfmap.Table
	size      int64 // bytes read so far
	mtime     int64 // ns, of the file when last read
	lastCheck time.Time
	skipped   int
	mapping   *Mapping // for JIT addresses in no mapping; made on first use
	pid       uint32
	nsPID     uint32 // the PID in the process's own namespace (NSpid), 0 when unknown
	nsRead    bool   // nsPID was read from /proc/PID/status
	absent    int    // looks in a row that found no perf map
}

// perfMapOf returns p's perf map, reading it or what was appended to it
// when due: on the first call, then at most every perfMapCheckInterval
// when the caller missed (found is false), else every perfMapRefresh;
// while no perf map was found, at waits doubling from
// perfMapCheckInterval up to perfMapAbsentMax.
func (t *procTable) perfMapOf(p *process, missed bool) *perfMap {
	pm := p.perf
	now := t.now()
	if pm == nil {
		pm = &perfMap{pid: p.pid}
		p.perf = pm
	} else {
		wait := perfMapRefresh
		switch {
		case pm.absent > 0:
			wait = min(perfMapCheckInterval<<min(pm.absent-1, 8), perfMapAbsentMax)
		case missed:
			wait = perfMapCheckInterval
		}
		if now.Sub(pm.lastCheck) < wait {
			return pm
		}
	}
	pm.lastCheck = now
	t.refreshPerfMap(p, pm)
	return pm
}

// refreshPerfMap reads what was appended to the perf map since the last
// read, or all of it when it shrank or was replaced: through the
// process's root, at /tmp/perf-PID.map with the host PID, else with
// the PID the process has in its own PID namespace (NSpid).
func (t *procTable) refreshPerfMap(p *process, pm *perfMap) {
	root, err := elfio.OpenRoot(t.path(p.pid, "root"))
	if err != nil {
		return // exited: keep what was read
	}
	defer root.Close()
	pm.absent++ // until a name opens
	names := []string{pm.inner}
	if pm.inner == "" {
		names = []string{perfMapName(p.pid)}
		if !pm.nsRead { // a process's PID namespace is its for life
			pm.nsPID, pm.nsRead = t.nsPID(p.pid), true
		}
		if ns := pm.nsPID; ns != 0 && ns != p.pid {
			names = append(names, perfMapName(ns))
		}
	}
	for _, name := range names {
		f, err := root.Open(name, math.MaxInt64)
		if err != nil {
			continue
		}
		pm.inner, pm.absent = name, 0
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
			pm.tab, pm.size, pm.skipped = perfmap.Table{}, 0, 0
		}
		pm.mtime = mtime
		t.readPerfMapTail(pm, f, min(size, maxPerfMapBytes))
		return
	}
}

// readPerfMapTail reads the complete lines of f between pm.size and
// limit (bytes) and adds their symbols.
func (t *procTable) readPerfMapTail(pm *perfMap, f io.ReaderAt, limit int64) {
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
		if limit == maxPerfMapBytes || int64(len(buf)) > perfmap.MaxLine {
			pm.size += int64(len(buf)) // a giant last line: skip it
			pm.skipped++
		}
		return // an unfinished line: read it once it is whole
	}
	syms, skipped := perfmap.Parse(buf[:last+1])
	pm.size += int64(last + 1)
	pm.skipped += skipped
	t.perfSkipped += uint64(skipped)
	pm.tab.Add(syms)
}

// perfMapName returns /tmp/perf-PID.map.
func perfMapName(pid uint32) string {
	return "/tmp/perf-" + strconv.FormatUint(uint64(pid), 10) + ".map"
}

// nsPID returns the PID that process pid has in its own PID namespace,
// the last NSpid value of <ProcRoot>/PID/status; 0 when unknown.
func (t *procTable) nsPID(pid uint32) uint32 {
	f, err := elfio.OpenRegular(t.path(pid, "status"), math.MaxInt64)
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
