package symbolize

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gprofile/gprofile/internal/symbolize/procmaps"

	"github.com/gprofile/gprofile/internal/symbolize/debuginfo"
	"github.com/gprofile/gprofile/internal/symbolize/elfio"
	"github.com/gprofile/gprofile/internal/symbolize/objfile"

	"golang.org/x/sys/unix"
)

// maxPendingFiles caps the binaries held open, not yet read: opened when
// a process that maps them is first seen, read at their first lookup.
// Past it, binaries are opened at their first lookup only.
const maxPendingFiles = 512

// binKey identifies a file across processes and mount namespaces: device
// and inode from /proc/PID/maps, and the path when the inode is 0.
type binKey struct {
	dev, inode uint64
	path       string
}

// keyOf returns the cache key of the file behind e.
func keyOf(e *procmaps.Entry) binKey {
	key := binKey{dev: e.Device, inode: e.Inode}
	if e.Inode == 0 {
		key.path = e.Path
	}
	return key
}

// binEntry is a binary in the cache: opened (file set) and waiting for
// its first lookup, or read: the Binary, or ReasonBadELF (a property of
// the file). Open failures are not cached here, since another process
// may be able to open the same file.
type binEntry struct {
	file    *os.File          // open, not read yet; nil once read
	opts    debuginfo.Options // how to read it (its root is closed once read)
	bin     *objfile.Binary
	reason  Reason
	buildID string // of a file that is not usable ELF, if its notes say
	stale   bool   // bin lacks a debug file debuginfod has since sent
}

// isFilePath reports whether a maps path names a file that may be ELF:
// an absolute path, but not a memfd or a SysV shared memory segment.
func isFilePath(path string) bool {
	return strings.HasPrefix(path, "/") && !strings.HasPrefix(path, "/memfd:") && !strings.HasPrefix(path, "/SYSV")
}

// prepare opens the file of a mapping just found in p's maps, through
// root (p's root, or nil), unless it is cached already or too many files
// are open: so that the binary can still be read when the process has
// exited or the file was deleted by the time its addresses are looked up.
func (s *Symbolizer) prepare(p *process, m *procMapping, root *elfio.Root) {
	e := &m.entry
	if !isFilePath(e.Path) || s.pending >= maxPendingFiles {
		return
	}
	key := keyOf(e)
	if _, ok := s.bins[key]; ok {
		return
	}
	f, opts, err := s.openMapped(p.pid, e, root)
	if err != nil {
		return // tried again at the first lookup, while the process lives
	}
	s.bins[key] = &binEntry{file: f, opts: opts}
	s.pending++
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
	case !isFilePath(e.Path):
		m.reason = ReasonNoSymbol // anonymous memory, [vsyscall], [anon:...], memfd
	default:
		m.bin, m.reason = s.binary(p.pid, e)
	}
	if m.bin != nil {
		m.reason = ReasonNone
		m.mapping.BuildID = m.bin.BuildID()
		m.bias, m.biasOK = m.bin.Bias(e.Start, e.Offset)
	} else if m.reason == ReasonBadELF {
		m.mapping.BuildID = s.buildIDOf(e)
	}
}

// binary returns the Binary of the file behind e, from the cache (read
// now if it was only opened) or read through process pid's view of the
// file system.
func (s *Symbolizer) binary(pid uint32, e *procmaps.Entry) (*objfile.Binary, Reason) {
	key := keyOf(e)
	be, ok := s.bins[key]
	if !ok {
		f, opts, err := s.openMapped(pid, e, nil)
		if err != nil {
			return nil, ReasonNoAccess
		}
		be = &binEntry{file: f, opts: opts}
		s.bins[key] = be
		s.pending++
	}
	if be.stale {
		s.reload(pid, e, be)
	}
	if be.file != nil {
		s.load(be)
	}
	return be.bin, be.reason
}

// reload opens the file of the stale entry be again, through process
// pid, so that the caller's load reads it with the debug file that has
// arrived since; if the file cannot be opened now (the process exited,
// say), be keeps its Binary without the debug file.
func (s *Symbolizer) reload(pid uint32, e *procmaps.Entry, be *binEntry) {
	be.stale = false
	if be.file != nil {
		return
	}
	f, opts, err := s.openMapped(pid, e, nil)
	if err != nil {
		return
	}
	be.file, be.opts = f, opts
	s.pending++
}

// buildIDOf returns the build ID the cache holds for the file of e when
// it is not usable ELF (see fileBuildID), else "".
func (s *Symbolizer) buildIDOf(e *procmaps.Entry) string {
	if be := s.bins[keyOf(e)]; be != nil {
		return be.buildID
	}
	return ""
}

// fileBuildID returns the GNU build ID of an ELF file that objfile.Load
// refused (its symbol tables corrupt, say) when its headers and notes
// can still be read, so that its frames can be symbolized later
// elsewhere; "" otherwise.
func fileBuildID(r io.ReaderAt) (id string) {
	defer func() {
		if recover() != nil {
			id = ""
		}
	}()
	f, _, err := elfio.OpenELF(r)
	if err != nil {
		return ""
	}
	return elfio.BuildID(f)
}

// load reads the opened binary of be and closes its file. It releases
// s.mu while it reads (a large binary's debug file takes long), so that
// Observe goes on; only Stack loads, so no other load of be can start.
func (s *Symbolizer) load(be *binEntry) {
	s.mu.Unlock()
	b, err := objfile.Load(be.file, be.opts)
	if err != nil && errors.Is(err, objfile.ErrBadELF) {
		be.buildID = fileBuildID(be.file)
	}
	s.mu.Lock()
	s.release(be)
	switch {
	case err == nil:
		be.bin = b
	case be.bin != nil:
		// Read again (see reload) and failed: keep the first reading.
	case errors.Is(err, objfile.ErrBadELF):
		be.reason = ReasonBadELF
	default:
		be.reason = ReasonNoAccess
	}
}

// sweepEvery is the least time between two sweeps of the binary cache.
const sweepEvery = 10 * time.Second

// sweepBinaries drops the binaries that no cached process maps any more
// (their processes were forgotten), at most once every sweepEvery, so
// that a long run over many short-lived programs does not keep every
// binary's symbols and DWARF. A binary mapped again later is read again.
// The caller holds s.mu.
func (s *Symbolizer) sweepBinaries() {
	now := s.now()
	if now.Sub(s.lastSweep) < sweepEvery {
		return
	}
	s.lastSweep = now
	used := make(map[binKey]bool, len(s.bins))
	for _, p := range s.procs {
		for _, m := range p.maps {
			used[keyOf(&m.entry)] = true
		}
	}
	for key, be := range s.bins {
		if !used[key] {
			s.release(be)
			delete(s.bins, key)
		}
	}
}

// release closes be's file and root.
func (s *Symbolizer) release(be *binEntry) {
	if be.file == nil {
		return
	}
	be.file.Close()
	be.opts.Root.Close()
	be.file, be.opts.Root = nil, nil
	s.pending--
}

// openMapped opens the file behind e as process pid sees it, never
// blocking and only if it is a regular file: its path inside the
// process's root (<ProcRoot>/PID/root, resolved there: a container's
// symlinks stay in the container), unless the file was deleted or that
// path now holds another inode; else <ProcRoot>/PID/map_files/<start>-<limit>
// (the mapped file itself, deleted or not; needs CAP_SYS_ADMIN); else
// <ProcRoot>/PID/exe when it is that inode. root is the process's root
// if the caller has it open, else nil. The debuginfo.Options say where its
// .gnu_debuglink file may be: next to it, inside the process's root.
func (s *Symbolizer) openMapped(pid uint32, e *procmaps.Entry, root *elfio.Root) (*os.File, debuginfo.Options, error) {
	opts := debuginfo.Options{DebugDirs: s.debugDirs, Dir: filepath.Dir(e.Path), OrigDir: filepath.Dir(e.Path), CacheDir: s.cacheDir, Debuginfod: s.debuginfod, Fetch: s.fetch}
	var firstErr error
	if root == nil {
		r, err := elfio.OpenRoot(s.procPath(pid, "root"))
		if err != nil {
			firstErr = err
		} else {
			root = r
			defer root.Close()
		}
	}
	if root != nil {
		opts.Root, _ = root.Dup()
	}
	if opts.Root == nil {
		opts.Dir = ""
	}
	var other *os.File // opened by path, but another inode than the mapping's
	for _, path := range pathCandidates(e) {
		if root == nil {
			break
		}
		f, err := root.Open(path, elfio.MaxBinaryBytes)
		switch {
		case err != nil:
			firstErr = cmpErr(firstErr, err)
		case sameInode(f, e.Inode):
			if other != nil {
				other.Close()
			}
			return f, opts, nil
		case other == nil && !e.Deleted:
			other = f
		default:
			f.Close()
		}
	}
	for _, name := range []string{fmt.Sprintf("map_files/%x-%x", e.Start, e.Limit), "exe"} {
		f, err := elfio.OpenRegular(s.procPath(pid, name), elfio.MaxBinaryBytes)
		if err != nil {
			firstErr = cmpErr(firstErr, err)
			continue
		}
		if name == "exe" && !sameInode(f, e.Inode) {
			f.Close()
			continue
		}
		if other != nil {
			other.Close()
		}
		return f, opts, nil
	}
	if other != nil {
		// Overlay file systems may report other inode numbers: better
		// this file than none.
		return other, opts, nil
	}
	opts.Root.Close()
	if firstErr == nil {
		firstErr = errors.New("no way to open it")
	}
	return nil, debuginfo.Options{}, fmt.Errorf("open %s: %w", e.Path, firstErr)
}

// pathCandidates returns the paths under which the file of e may be
// found in its process's root: the path as maps shows it, and with the
// newlines that maps escapes as "\012" restored; for a mapping marked
// deleted, the same with " (deleted)" appended, in case the suffix was
// part of the name (openMapped then requires the mapping's inode).
func pathCandidates(e *procmaps.Entry) []string {
	paths := []string{e.Path}
	if strings.Contains(e.Path, `\012`) {
		paths = append(paths, strings.ReplaceAll(e.Path, `\012`, "\n"))
	}
	if e.Deleted {
		for i := range paths {
			paths[i] += procmaps.DeletedSuffix
		}
	}
	return paths
}

// cmpErr returns first, or err when first is nil.
func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
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
func (s *Symbolizer) vdsoFor(e *procmaps.Entry) *objfile.Binary {
	if !s.vdsoTried {
		s.vdsoTried = true
		s.vdso, s.vdsoSize = loadVDSO(s.procRoot, &debuginfo.Options{DebugDirs: s.debugDirs, Debuginfod: s.debuginfod, Fetch: s.fetch})
	}
	if s.vdso == nil || e.Limit-e.Start != s.vdsoSize {
		return nil
	}
	return s.vdso
}

// loadVDSO reads our own vDSO image from <procRoot>/self/mem at the
// [vdso] mapping of <procRoot>/self/maps, and returns it with its size in
// bytes. Its debug file, if any (linux-image-*-dbg ships one), is found
// by build ID as opts says (opts.DebugDirs, then debuginfod); nil opts
// means the zero debuginfo.Options.
func loadVDSO(procRoot string, opts *debuginfo.Options) (*objfile.Binary, uint64) {
	if opts == nil {
		opts = &debuginfo.Options{}
	}
	data, err := os.ReadFile(procRoot + "/self/maps")
	if err != nil {
		return nil, 0
	}
	entries, _ := procmaps.Parse(bytes.NewReader(data))
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
		b, err := objfile.Load(bytes.NewReader(img), *opts)
		if err != nil {
			return nil, 0
		}
		return b, e.Limit - e.Start
	}
	return nil, 0
}
