package symbolize

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

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

// isFilePath reports whether a maps path names a file that may be ELF:
// an absolute path, but not a SysV shared memory segment. A memfd file
// (isMemfd) may be either a program exec'd from it or JIT code.
func isFilePath(path string) bool {
	return strings.HasPrefix(path, "/") && !strings.HasPrefix(path, "/SYSV")
}

// isMemfd reports whether a maps path names a memfd file ("/memfd:NAME",
// memfd_create(2)): JIT code that a perf map names, or an ELF program
// exec'd from it (a sealed copy of itself that a container runtime or an
// agent runs, read through /proc/PID/map_files like a deleted file).
func isMemfd(path string) bool { return strings.HasPrefix(path, "/memfd:") }

// opened is what opening a mapping's file gave: the shared Mapping, the
// Binary and the load bias, or the reason there is no Binary.
type opened struct {
	mapping *Mapping
	bin     *objfile.Binary
	reason  Reason
	bias    uint64
	biasOK  bool
}

// opening opens the file of the mapping e of process pid (through the
// binary cache, which reads it once) and says what it gave. It holds no
// lock of the Symbolizer's and runs on Stack's goroutine (the vDSO and
// the binary cache's reloads are that goroutine's).
func (s *Symbolizer) opening(pid uint32, e *procmaps.Entry) opened {
	o := opened{mapping: &Mapping{
		Start: e.Start, Limit: e.Limit, Offset: e.Offset, Path: e.Path,
		Device: e.Device, Inode: e.Inode,
	}}
	switch {
	case e.Path == "[vdso]":
		o.bin, o.reason = s.vdsoFor(e), ReasonNoSymbol
	case !isFilePath(e.Path):
		o.reason = ReasonNoSymbol // anonymous memory, [vsyscall], [anon:...]
	default:
		o.bin, o.reason = s.binary(pid, e)
		if o.bin == nil && isMemfd(e.Path) {
			o.reason = ReasonNoSymbol // JIT code, not a program: the perf map names it
		}
	}
	if o.bin != nil {
		o.reason = ReasonNone
		o.mapping.BuildID, o.mapping.program = o.bin.BuildID(), true
		o.bias, o.biasOK = o.bin.Bias(e.Start, e.Offset)
	} else if o.reason == ReasonBadELF {
		o.mapping.BuildID = s.buildIDOf(e)
	}
	return o
}

// set fills in m from o. The caller holds s.procs.mu: m's resolution fields
// are written only under it, by Stack's goroutine, which alone may read
// them without it (CodeAt reads them under it from the reader).
func (m *procMapping) set(o opened) {
	m.opened = true
	m.mapping, m.bin, m.reason, m.bias, m.biasOK = o.mapping, o.bin, o.reason, o.bias, o.biasOK
}

// open fills in m from its file, on first use, reading the file with no
// lock held. The caller does not hold s.procs.mu.
func (s *Symbolizer) open(pid uint32, m *procMapping) {
	o := s.opening(pid, &m.entry)
	s.procs.mu.Lock()
	m.set(o)
	s.procs.mu.Unlock()
}

// openLocked is open for a caller that holds s.procs.mu (on Stack's
// goroutine): a mapping without a file to read is filled in at once;
// for a file, s.procs.mu is released while it is read, so that the reader
// goroutine goes on.
func (s *Symbolizer) openLocked(pid uint32, m *procMapping) {
	if !isFilePath(m.entry.Path) {
		m.set(s.opening(pid, &m.entry))
		return
	}
	s.procs.mu.Unlock()
	o := s.opening(pid, &m.entry)
	s.procs.mu.Lock()
	if !m.opened {
		m.set(o)
	}
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
		r, err := elfio.OpenRoot(s.procs.path(pid, "root"))
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
		f, err := elfio.OpenRegular(s.procs.path(pid, name), elfio.MaxBinaryBytes)
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
		s.vdso, s.vdsoSize = loadVDSO(s.procs.root, &debuginfo.Options{DebugDirs: s.debugDirs, Debuginfod: s.debuginfod, Fetch: s.fetch})
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
