package procmaps

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/gprofile/gprofile/internal/symbolize/internal/textscan"

	"golang.org/x/sys/unix"
)

// Entry is one line of /proc/PID/maps:
//
//	55a22b7e5000-55a22b7ea000 r-xp 00002000 fe:00 247026   /usr/bin/cat
type Entry struct {
	// Start and Limit bound the mapping [Start, Limit) in the process's
	// virtual address space (bytes).
	Start, Limit uint64
	// Offset is the file offset of Start (bytes); 0 for anonymous memory.
	Offset uint64
	// Perms is the permission field as written, such as "r-xp".
	Perms string
	// Device is the device number of the file (unix.Mkdev of the
	// "major:minor" hex pair), and Inode its inode; both 0 for anonymous
	// memory and pseudo-paths.
	Device, Inode uint64
	// Path is the file as the process sees it (in its mount namespace),
	// a pseudo-path such as "[vdso]", "[heap]" or "[anon:name]", or ""
	// for anonymous memory. The kernel's " (deleted)" suffix is removed;
	// a newline in a file name stays escaped as the kernel writes it,
	// "\012" (the symbolizer tries both forms when it opens the file).
	Path string
	// Deleted reports that the file was deleted (or replaced) after it was
	// mapped: Path no longer names it; /proc/PID/map_files still does.
	Deleted bool
}

// Executable reports whether the mapping may hold code ('x' in Perms).
func (e *Entry) Executable() bool { return strings.IndexByte(e.Perms, 'x') >= 0 }

// SyntaxError reports lines of a maps file that ParseMaps skipped.
type SyntaxError struct {
	Line    int    // 1-based number of the first skipped line
	Text    string // that line
	Skipped int    // number of lines skipped
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("parse maps: skipped %d malformed lines, first at line %d: %q",
		e.Skipped, e.Line, e.Text)
}

// DeletedSuffix ends the path of a mapping whose file was deleted or
// replaced since it was mapped (as the kernel prints it in
// /proc/PID/maps); Parse keeps it off Entry.Path and sets Entry.Deleted.
const DeletedSuffix = " (deleted)"

// readBufs holds the buffers Parse reads a maps file into: every entry's
// path is copied out of it, so it serves the next Parse, and a
// whole-system profile's maps re-reads stop making garbage
// (BenchmarkParse reports the bytes a parse allocates).
var readBufs = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// maxPooledBuf is the largest buffer readBufs keeps: 1 MiB.
const maxPooledBuf = 1 << 20

// Parse parses /proc/PID/maps text into its entries, in file order
// (ascending Start). Malformed lines never stop it: they are skipped, and
// the entries of all other lines come back together with a
// *MapsSyntaxError that counts the skipped lines (use errors.As to tell it
// from a read error). A read error returns the entries parsed so far and
// the wrapped error.
func Parse(r io.Reader) ([]Entry, error) {
	bp := readBufs.Get().(*[]byte)
	defer readBufs.Put(bp)
	data, readErr := textscan.ReadInto(r, (*bp)[:0])
	if cap(data) <= maxPooledBuf {
		*bp = data[:0] // a grown buffer serves the next read
	}
	entries := make([]Entry, 0, bytes.Count(data, textscan.Newline)+1)
	var bad *SyntaxError
	lastPath := ""
	for lineNo := 1; len(data) > 0; lineNo++ {
		var line []byte
		line, data, _ = bytes.Cut(data, textscan.Newline)
		if len(line) == 0 {
			continue
		}
		e, ok := parseMapsLine(line, lastPath)
		if !ok {
			if bad == nil {
				bad = &SyntaxError{Line: lineNo, Text: string(line)}
			}
			bad.Skipped++
			continue
		}
		lastPath = e.Path
		entries = append(entries, e)
	}
	if readErr != nil {
		return entries, fmt.Errorf("read maps: %w", readErr)
	}
	if bad != nil {
		return entries, bad
	}
	return entries, nil
}

// parseMapsLine parses one line. lastPath is the previous line's path,
// reused (not reallocated) when equal, as consecutive lines of one file
// are.
func parseMapsLine(line []byte, lastPath string) (e Entry, ok bool) {
	var n int
	p := line
	if e.Start, n, ok = textscan.ParseHex(p); !ok || !next(&p, n, '-') {
		return e, false
	}
	if e.Limit, n, ok = textscan.ParseHex(p); !ok || !next(&p, n, ' ') || e.Limit < e.Start {
		return e, false
	}
	sp := bytes.IndexByte(p, ' ')
	if sp <= 0 {
		return e, false
	}
	e.Perms = internPerms(p[:sp])
	p = p[sp+1:]
	if e.Offset, n, ok = textscan.ParseHex(p); !ok || !next(&p, n, ' ') {
		return e, false
	}
	major, n, ok := textscan.ParseHex(p)
	if !ok || !next(&p, n, ':') || major > 0xffffffff {
		return e, false
	}
	minor, n, ok := textscan.ParseHex(p)
	if !ok || minor > 0xffffffff {
		return e, false
	}
	e.Device = unix.Mkdev(uint32(major), uint32(minor))
	p = p[n:]
	if e.Inode, n, ok = parseDec(bytes.TrimLeft(p, " ")); !ok {
		return e, false
	}
	p = bytes.TrimLeft(p, " ")[n:]
	if len(p) > 0 && p[0] != ' ' {
		return e, false
	}
	setPath(&e, bytes.TrimLeft(p, " "), lastPath)
	return e, true
}

// setPath sets Path and Deleted from the path field.
func setPath(e *Entry, path []byte, lastPath string) {
	if bytes.HasSuffix(path, []byte(DeletedSuffix)) {
		e.Deleted = true
		path = path[:len(path)-len(DeletedSuffix)]
	}
	if string(path) == lastPath { // no allocation
		e.Path = lastPath
	} else {
		e.Path = string(path)
	}
}

// next checks that p[n] is sep and advances p past it.
func next(p *[]byte, n int, sep byte) bool {
	if n >= len(*p) || (*p)[n] != sep {
		return false
	}
	*p = (*p)[n+1:]
	return true
}

// parseDec parses the leading decimal digits of b as a uint64.
func parseDec(b []byte) (v uint64, n int, ok bool) {
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		d := uint64(b[n] - '0')
		if v > (1<<64-1-d)/10 {
			return 0, n, false
		}
		v = v*10 + d
		n++
	}
	return v, n, n > 0
}

// internPerms returns the common permission strings without allocating.
func internPerms(b []byte) string {
	switch string(b) {
	case "r-xp":
		return "r-xp"
	case "r--p":
		return "r--p"
	case "rw-p":
		return "rw-p"
	case "---p":
		return "---p"
	case "rwxp":
		return "rwxp"
	case "r--s":
		return "r--s"
	case "rw-s":
		return "rw-s"
	}
	return string(b)
}
