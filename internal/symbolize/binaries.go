package symbolize

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// binKey identifies a file across processes and mount namespaces: device
// and inode from /proc/PID/maps, and the path when the inode is 0.
type binKey struct {
	dev, inode uint64
	path       string
}

// binEntry is a cached outcome of reading a binary: the Binary, or
// ReasonBadELF (a property of the file). Open failures are not cached
// here, since another process may be able to open the same file.
type binEntry struct {
	bin    *Binary
	reason Reason
}

// open fills in m from its file, on first use: the shared Mapping, the
// Binary and the load bias, or the reason there is no Binary.
func (s *Symbolizer) open(p *process, m *procMapping) {
	e := &m.entry
	m.opened = true
	m.mapping = &Mapping{
		Start: e.Start, Limit: e.Limit, Offset: e.Offset, Path: e.Path,
		Device: e.Device, Inode: e.Inode,
	}
	switch {
	case e.Path == "[vdso]":
		m.bin, m.reason = s.vdsoFor(e), ReasonNoSymbol
	case !strings.HasPrefix(e.Path, "/"):
		m.reason = ReasonNoSymbol // anonymous memory, [vsyscall], [anon:...]
	default:
		m.bin, m.reason = s.binary(p.pid, e)
	}
	if m.bin != nil {
		m.reason = ReasonNone
		m.mapping.BuildID = m.bin.BuildID()
		m.bias, m.biasOK = m.bin.Bias(e.Start, e.Offset)
	}
}

// binary returns the Binary of the file behind e, from the cache or read
// through process pid's view of the file system.
func (s *Symbolizer) binary(pid uint32, e *MapsEntry) (*Binary, Reason) {
	key := binKey{dev: e.Device, inode: e.Inode}
	if e.Inode == 0 {
		key.path = e.Path
	}
	if be, ok := s.bins[key]; ok {
		return be.bin, be.reason
	}
	b, err := s.openBinary(pid, e)
	switch {
	case err == nil:
		s.bins[key] = &binEntry{bin: b}
		return b, ReasonNone
	case errors.Is(err, ErrBadELF):
		s.bins[key] = &binEntry{reason: ReasonBadELF}
		return nil, ReasonBadELF
	}
	return nil, ReasonNoAccess
}

// openBinary reads the file behind e as process pid sees it: through
// <ProcRoot>/PID/root/<path> (its mount namespace), or, when the file was
// deleted or that path now holds another inode, through
// <ProcRoot>/PID/map_files/<start>-<limit>. Its separate debug file is
// looked for in the Symbolizer's DebugDirs (host paths) and, by
// .gnu_debuglink, next to the binary in the process's mount namespace.
// Errors wrap ErrBadELF when the file was opened but is not usable ELF.
func (s *Symbolizer) openBinary(pid uint32, e *MapsEntry) (*Binary, error) {
	paths := make([]string, 0, 2)
	if !e.Deleted {
		paths = append(paths, s.procPath(pid, "root")+e.Path)
	}
	paths = append(paths, s.procPath(pid, fmt.Sprintf("map_files/%x-%x", e.Start, e.Limit)))
	load := LoadOptions{DebugDirs: s.debugDirs, OrigDir: filepath.Dir(e.Path)}
	if !e.Deleted {
		load.Dir = s.procPath(pid, "root") + load.OrigDir
	}
	var firstErr error
	var other *os.File // opened, but not the inode of the mapping
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			firstErr = cmp.Or(firstErr, err)
			continue
		}
		if !sameInode(f, e.Inode) && other == nil {
			other = f
			continue
		}
		if other != nil {
			other.Close()
		}
		defer f.Close()
		return LoadBinary(f, load)
	}
	if other != nil {
		// Overlay file systems may report other inode numbers: better
		// this file than none.
		defer other.Close()
		return LoadBinary(other, load)
	}
	return nil, fmt.Errorf("open %s: %w", e.Path, firstErr)
}

// sameInode reports whether f is inode ino (always true for ino 0, or
// when f cannot be stat'ed).
func sameInode(f *os.File, ino uint64) bool {
	var st unix.Stat_t
	if ino == 0 || unix.Fstat(int(f.Fd()), &st) != nil {
		return true
	}
	return st.Ino == ino
}

// vdsoFor returns the Binary of the vDSO for a [vdso] mapping: our own
// vDSO, read once, which every process of this kernel shares when it is of
// our word size (checked by the mapping's size). nil when unavailable.
func (s *Symbolizer) vdsoFor(e *MapsEntry) *Binary {
	if !s.vdsoTried {
		s.vdsoTried = true
		s.vdso, s.vdsoSize = loadVDSO(s.procRoot, s.debugDirs)
	}
	if s.vdso == nil || e.Limit-e.Start != s.vdsoSize {
		return nil
	}
	return s.vdso
}

// loadVDSO reads our own vDSO image from <procRoot>/self/mem at the
// [vdso] mapping of <procRoot>/self/maps, and returns it with its size in
// bytes. Its debug file, if any (linux-image-*-dbg ships one), is found
// by build ID in debugDirs.
func loadVDSO(procRoot string, debugDirs []string) (*Binary, uint64) {
	data, err := os.ReadFile(procRoot + "/self/maps")
	if err != nil {
		return nil, 0
	}
	entries, _ := ParseMaps(bytes.NewReader(data))
	for _, e := range entries {
		if e.Path != "[vdso]" || e.Limit-e.Start > 1<<20 {
			continue
		}
		mem, err := os.Open(procRoot + "/self/mem")
		if err != nil {
			return nil, 0
		}
		defer mem.Close()
		img := make([]byte, e.Limit-e.Start)
		if _, err := mem.ReadAt(img, int64(e.Start)); err != nil {
			return nil, 0
		}
		b, err := LoadBinary(bytes.NewReader(img), LoadOptions{DebugDirs: debugDirs})
		if err != nil {
			return nil, 0
		}
		return b, e.Limit - e.Start
	}
	return nil, 0
}
