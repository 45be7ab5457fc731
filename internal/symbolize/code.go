package symbolize

import (
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// CodeKind says what kind of code a CodeObject holds, which decides how
// an unwinder steps through its frames.
type CodeKind uint8

const (
	// CodeELF is an ELF file mapped from disk (its .eh_frame or
	// .debug_frame, else frame pointers).
	CodeELF CodeKind = iota
	// CodeJIT is executable memory with no file: JIT code (perf map
	// /tmp/perf-PID.map, or none): frame pointers only.
	CodeJIT
	// CodeVDSO is the kernel's vDSO ([vdso]), whose image is the same in
	// every 64-bit process of the running kernel.
	CodeVDSO
)

// CodeObject is the executable mapping of a process that holds an
// address, as an unwinder needs it: which file (for its CFI), where it
// is loaded. Data source: /proc/PID/maps as last read (at exec, or when
// an address fell outside every mapping), and the file's ELF headers.
type CodeObject struct {
	// Start and Limit bound the mapping [Start, Limit), process addresses.
	Start, Limit uint64
	// Key identifies the file's content: its GNU build ID (hex) when it
	// has one, else "dev:inode"; "" for CodeJIT and CodeVDSO.
	Key string
	// Bias is process address minus ELF virtual address, bytes (the
	// mapping's start for the vDSO, which is linked at 0).
	Bias uint64
	// Path opens the file from this process: <ProcRoot>/PID/root/<path>
	// while the process lives, else the path itself when it is the
	// same inode there, else <ProcRoot>/PID/map_files/<start>-<limit>
	// (a file deleted or replaced since it was mapped: the mapped file
	// itself, while the process lives; needs CAP_SYS_ADMIN or
	// CAP_CHECKPOINT_RESTORE); "" for CodeJIT and CodeVDSO.
	Path string
	// Kind is CodeELF, CodeJIT or CodeVDSO.
	Kind CodeKind
}

// CodeLookup says how far CodeAt may go to answer.
type CodeLookup uint8

const (
	// CodeTry answers only if the symbolizer's lock is free now (else
	// CodeNotRead) and reads no binary: for a goroutine that must not
	// wait (a ring buffer reader).
	CodeTry CodeLookup = iota
	// CodeRead reads the mapping's binary on first use, as Stack does
	// for a frame there; only on the goroutine that calls Stack (one
	// goroutine reads binaries: the lock is released while it does).
	CodeRead
)

// CodeAt returns the executable mapping of process pid that holds addr,
// reading the process's maps on first sight. An address in no executable
// mapping makes the maps be read again (rate-limited, as for
// ObserveStack: the dynamic loader maps libraries after the exec-time
// read, and JIT compilers make code executable after writing it). A mapping
// whose binary has not been read yet gives CodeNotRead unless how is
// CodeRead. The result is computed once per mapping; later calls cost a
// lock and a binary search.
func (s *Symbolizer) CodeAt(pid uint32, addr uint64, how CodeLookup) (CodeObject, CodeStatus) {
	if how == CodeTry {
		if !s.procs.mu.TryLock() {
			return CodeObject{}, CodeNotRead
		}
	} else {
		s.procs.mu.Lock()
	}
	defer s.procs.mu.Unlock()
	p := s.procs.process(pid)
	m := p.find(addr)
	// A pc in a data mapping as last read is re-read too: JIT compilers
	// map code writable first and make it executable later (V8).
	if m == nil && addr >= minCodeAddr && !p.gone && s.procs.now().Sub(p.lastRead) >= p.reread {
		s.procs.readMaps(p)
		m = p.find(addr)
	}
	if m == nil {
		return CodeObject{}, CodeNone
	}
	if m.code == nil {
		if !m.opened && how == CodeRead {
			s.openLocked(pid, m)
		}
		// A file mapping is read when its Binary or the reason it has
		// none is set (openLocked sets both at once, under s.procs.mu, which
		// it releases while it reads the file).
		if !m.opened || isFilePath(m.entry.Path) && m.bin == nil && m.reason == ReasonNone {
			return CodeObject{}, CodeNotRead
		}
		m.code = s.codeObject(p, m)
	}
	return *m.code, CodeFound
}

// CodeStatus is what CodeAt found.
type CodeStatus uint8

const (
	// CodeFound: the CodeObject is set.
	CodeFound CodeStatus = iota
	// CodeNone: no executable mapping holds the address.
	CodeNone
	// CodeNotRead: the mapping's binary has not been read yet, or (with
	// CodeTry) the lock was busy.
	CodeNotRead
)

// codeObject describes the opened mapping m of p for CodeAt.
func (s *Symbolizer) codeObject(p *process, m *procMapping) *CodeObject {
	e := &m.entry
	c := &CodeObject{Start: e.Start, Limit: e.Limit, Bias: m.bias}
	switch {
	case e.Path == "[vdso]":
		c.Kind = CodeVDSO
		if !m.biasOK {
			c.Bias = e.Start
		}
		return c
	case !isFilePath(e.Path):
		c.Kind = CodeJIT
		return c
	}
	if !m.biasOK {
		// No ELF headers to read (the file could not be opened or is
		// not ELF): an unwinder cannot place its CFI.
		c.Kind = CodeJIT
		return c
	}
	c.Key = m.mapping.BuildID
	if c.Key == "" {
		c.Key = strconv.FormatUint(e.Device, 16) + ":" + strconv.FormatUint(e.Inode, 10)
	}
	var st unix.Stat_t
	if path := s.procs.path(p.pid, "root") + e.Path; unix.Stat(path, &st) == nil && (e.Inode == 0 || st.Ino == e.Inode) {
		c.Path = path
	} else if unix.Stat(e.Path, &st) == nil && st.Ino == e.Inode {
		c.Path = e.Path
	} else {
		// Deleted or replaced (a package upgraded under a running
		// process): its CFI is in the mapped file itself.
		c.Path = s.procs.path(p.pid, fmt.Sprintf("map_files/%x-%x", e.Start, e.Limit))
	}
	return c
}
