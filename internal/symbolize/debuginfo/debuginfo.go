package debuginfo

import (
	"bytes"
	"context"
	"debug/elf"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"github.com/gprofile/gprofile/internal/symbolize/debuginfo/debuginfod"
	"github.com/gprofile/gprofile/internal/symbolize/elfio"
)

// DefaultDebugDirs returns the global debug directories searched when
// none are configured: /usr/lib/debug, as gdb, perf and elfutils use.
func DefaultDebugDirs() []string { return []string{"/usr/lib/debug"} }

// Options says where objfile.Load looks for a binary's separate debug
// information. The zero value searches DefaultDebugDirs by build ID only;
// with Debuginfod set, then the debuginfod cache and servers: objfile.Load
// waits for the download unless Fetch is set (a Symbolizer runs it in the
// background; see Symbolizer.Generation).
type Options struct {
	// DebugDirs are the global debug directories, host paths, searched in
	// order: <dir>/.build-id/<first 2 hex digits>/<rest>.debug by GNU build
	// ID, then <dir>/<OrigDir>/<name> by .gnu_debuglink. nil means
	// DefaultDebugDirs(); an empty, non-nil slice searches none.
	DebugDirs []string
	// Dir is the directory holding the binary, as this process can open
	// it (for a process in another mount namespace, through
	// /proc/PID/root). .gnu_debuglink names are looked for in Dir and
	// Dir/.debug; "" skips both.
	Dir string
	// OrigDir is the binary's directory as its own file system names it,
	// appended to each of DebugDirs for .gnu_debuglink; "" means Dir.
	OrigDir string
	// CacheDir, when not "", keeps the inflated bytes of compressed DWARF
	// sections there, by build ID, for the next load of the same file
	// (see dwarfline.SectionCache; at most DefaultSectionCacheBytes): sections are
	// read from it where it has them, and written to it when inflated
	// whole, or, for those inflated on demand, by Binary.SaveCache,
	// which also writes the binary's line memo there.
	CacheDir string

	// Root, when set, is the root of the process that mapped the
	// binary, and Dir a path inside it, resolved inside it.
	Root *elfio.Root
	// Debuginfod, when set, is asked for the debug file of a binary with
	// a build ID that has none on disk; nil never touches the network.
	Debuginfod *debuginfod.Client
	// Fetch, when set, runs Debuginfod's downloads in the background
	// (see fetchDebugFile); nil blocks objfile.Load for the download.
	Fetch *debuginfod.Fetcher
}

// debugDirs returns o.DebugDirs, or the default when it is nil.
func (o *Options) debugDirs() []string {
	if o.DebugDirs == nil {
		return DefaultDebugDirs()
	}
	return o.DebugDirs
}

// File is an opened separate debug file: an ELF file (usually made
// by objcopy --only-keep-debug) whose .symtab and DWARF describe the
// binary, at the binary's virtual addresses.
type File struct {
	Path   string // where the debug file was found
	file   *os.File
	ELF    *elf.File       // the debug file, parsed over Reader
	Reader *elfio.ReaderAt // reads the debug file within a budget
}

// Close closes the file; it is a no-op on a nil *File.
func (d *File) Close() {
	if d != nil {
		d.file.Close()
	}
}

// Needed reports whether f lacks what a separate debug file can
// add: a .symtab, or DWARF.
func Needed(f *elf.File) bool {
	return f.Section(".symtab") == nil || !HasDWARF(f)
}

// Find returns the separate debug file of f (whose hex build ID
// is buildID and which was read from self), or nil when there is none
// that matches. It looks by build ID first, then by .gnu_debuglink,
// whose CRC must match. Unreadable or corrupt candidates are skipped.
// Failing those, when f has no DWARF, it asks the debuginfod cache and
// servers of DEBUGINFOD_URLS, if set (see fetchDebugFile): in the
// background through opts.fetch when set.
func Find(f *elf.File, buildID string, self io.ReaderAt, opts *Options) *File {
	if d := findLocalDebugFile(f, buildID, self, opts); d != nil || HasDWARF(f) {
		return d
	}
	return fetchDebugFile(f, buildID, self, opts.Debuginfod, opts.Fetch)
}

// FindLocal returns the separate debug file of f found in the file
// system, as Find looks for it (by build ID in the debug directories,
// then by .gnu_debuglink), never asking debuginfod; nil when there is
// none. gprofile check uses it to say where a binary's debug
// information is.
func FindLocal(f *elf.File, buildID string, self io.ReaderAt, opts *Options) *File {
	return findLocalDebugFile(f, buildID, self, opts)
}

// findLocalDebugFile looks for the debug file of f in the file system,
// as Find says.
func findLocalDebugFile(f *elf.File, buildID string, self io.ReaderAt, opts *Options) *File {
	if len(buildID) > 2 {
		for _, dir := range opts.debugDirs() {
			path := filepath.Join(dir, ".build-id", buildID[:2], buildID[2:]+".debug")
			if d := openDebugFile(debugPath{path: path}, f, buildID, self, nil); d != nil {
				return d
			}
		}
	}
	name, crc, ok := debugLink(f)
	if !ok {
		return nil
	}
	for _, path := range debugLinkPaths(name, opts) {
		if d := openDebugFile(path, f, buildID, self, &crc); d != nil {
			return d
		}
	}
	return nil
}

// debugPath is a candidate debug file: a host path, or (root set) a path
// inside a process's root.
type debugPath struct {
	path string
	root *elfio.Root
}

// open opens the candidate for reading, never blocking (see
// elfio.OpenRegular).
func (p debugPath) open() (*os.File, error) {
	if p.root != nil {
		return p.root.Open(p.path, elfio.MaxBinaryBytes)
	}
	return elfio.OpenRegular(p.path, elfio.MaxBinaryBytes)
}

// debugLinkPaths returns the places gdb looks for a .gnu_debuglink name:
// next to the binary, in its .debug subdirectory, and under each global
// debug directory at the binary's own path.
func debugLinkPaths(name string, opts *Options) []debugPath {
	var paths []debugPath
	if opts.Dir != "" {
		paths = append(paths,
			debugPath{filepath.Join(opts.Dir, name), opts.Root},
			debugPath{filepath.Join(opts.Dir, ".debug", name), opts.Root})
	}
	orig := opts.OrigDir
	if orig == "" {
		orig = opts.Dir
	}
	if orig != "" {
		for _, dir := range opts.debugDirs() {
			paths = append(paths, debugPath{path: filepath.Join(dir, orig, name)})
		}
	}
	return paths
}

// debugLink returns the file name and CRC-32 of f's .gnu_debuglink
// section: a NUL-terminated base name, padding to 4 bytes, and the CRC in
// f's byte order. ok is false when f has none or it is malformed.
func debugLink(f *elf.File) (name string, crc uint32, ok bool) {
	sec := f.Section(".gnu_debuglink")
	if sec == nil || sec.Type == elf.SHT_NOBITS || sec.Size > 4096 {
		return "", 0, false
	}
	data, err := sec.Data()
	if err != nil {
		return "", 0, false
	}
	n := bytes.IndexByte(data, 0)
	if n <= 0 {
		return "", 0, false
	}
	off := elfio.Align4(uint64(n) + 1)
	if off+4 > uint64(len(data)) {
		return "", 0, false
	}
	name = string(data[:n])
	if filepath.Base(name) != name || name == "." || name == ".." {
		return "", 0, false // a link names a file, never a path
	}
	return name, f.ByteOrder.Uint32(data[off:]), true
}

// openDebugFile opens the candidate debug file at path for the binary f
// (read from self). It returns nil when the file is missing, is self, is
// not ELF of f's class and machine, has another build ID than buildID,
// or (when wantCRC is not nil) has another CRC-32 (IEEE, over the whole
// file, as gdb computes it).
func openDebugFile(path debugPath, f *elf.File, buildID string, self io.ReaderAt, wantCRC *uint32) (d *File) {
	file, err := path.open()
	if err != nil {
		return nil
	}
	defer func() {
		if p := recover(); p != nil {
			d = nil // debug/elf panicked on a corrupt file
		}
		if d == nil {
			file.Close()
		}
	}()
	st, err := file.Stat()
	if err != nil || sameFile(self, st) {
		return nil
	}
	if wantCRC != nil {
		h := crc32.NewIEEE()
		if _, err := io.Copy(h, file); err != nil || h.Sum32() != *wantCRC {
			return nil
		}
	}
	ef, lr, err := elfio.OpenELF(file)
	if err != nil || ef.Class != f.Class || ef.Machine != f.Machine {
		return nil
	}
	if id := elfio.SectionsBuildID(ef); buildID != "" && id != "" && id != buildID {
		return nil
	}
	return &File{Path: file.Name(), file: file, ELF: ef, Reader: lr}
}

// sameFile reports whether self is an *os.File of the file st describes.
func sameFile(self io.ReaderAt, st os.FileInfo) bool {
	of, ok := self.(*os.File)
	if !ok {
		return false
	}
	ost, err := of.Stat()
	return err == nil && os.SameFile(ost, st)
}

// HasDWARF reports whether f holds DWARF debug information.
func HasDWARF(f *elf.File) bool {
	for _, name := range []string{".debug_info", ".zdebug_info"} {
		if s := f.Section(name); s != nil && s.Type != elf.SHT_NOBITS && s.Size > 0 {
			return true
		}
	}
	return false
}

// fetchDebugFile is the last resort of Find: the debug file of
// f (hex build ID buildID, read from self) from the debuginfod cache or
// servers through c, or nil when c is nil (debuginfod is off), f has no build ID, or no server
// has it (see debuginfod.Client.cached). A cached file (or a known miss)
// is answered at once. Otherwise, when fetcher is not nil, the download
// starts in the background and fetchDebugFile returns nil: the fetcher
// tells its Symbolizer when the file has arrived. With fetcher nil (a
// objfile.Load outside a Symbolizer) it blocks for as long as the download
// takes (DEBUGINFOD_TIMEOUT and DEBUGINFOD_MAXTIME bound it).
func fetchDebugFile(f *elf.File, buildID string, self io.ReaderAt, c *debuginfod.Client, fetcher *debuginfod.Fetcher) *File {
	if c == nil || !debuginfod.ValidBuildID(buildID) {
		return nil
	}
	path, known := c.Cached(buildID)
	switch {
	case known:
	case fetcher != nil:
		fetcher.Start(c, debuginfod.KindOf(f), buildID)
		return nil
	default:
		path = c.Get(context.Background(), debuginfod.KindOf(f), buildID)
	}
	if path == "" {
		return nil
	}
	return openDebugFile(debugPath{path: path}, f, buildID, self, nil)
}
