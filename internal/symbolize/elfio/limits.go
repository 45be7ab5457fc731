package elfio

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Caps on what reading one binary may cost, so that a corrupt or hostile
// file (a sparse file of gigabytes with absurd section sizes, say) is
// refused or cut short instead of being read whole. Sizes in bytes.
const (
	// maxHeaderRead caps what elf.NewFile reads: the program and section
	// header tables and the section name string table.
	maxHeaderRead = 16 << 20
	// maxSymtabBytes caps a symbol table (.symtab, .dynsym) and, apart,
	// its string table.
	maxSymtabBytes = 1 << 30
	// MaxPclntabBytes caps a Go binary's .gopclntab.
	MaxPclntabBytes = 1 << 30
	// maxLoadRead caps everything objfile.Load reads from one file.
	maxLoadRead = 3 << 30
)

// ErrReadBudget is returned by a ReaderAt whose budget is spent.
var ErrReadBudget = errors.New("read budget exhausted")

// ReaderAt reads from r at most budget bytes in all, and never
// past size (when known, ≥ 0).
type ReaderAt struct {
	r      io.ReaderAt
	size   int64
	budget atomic.Int64 // sections may be read in parallel
}

// NewReaderAt wraps r with a budget, learning its size from
// Stat (files) or Size (bytes.Reader, io.SectionReader) when it can.
func NewReaderAt(r io.ReaderAt, budget int64) *ReaderAt {
	size := int64(-1)
	switch v := r.(type) {
	case *os.File:
		if st, err := v.Stat(); err == nil && st.Mode().IsRegular() {
			size = st.Size()
		}
	case interface{ Size() int64 }:
		size = v.Size()
	}
	lr := &ReaderAt{r: r, size: size}
	lr.budget.Store(budget)
	return lr
}

// ReadAt implements io.ReaderAt: it reads len(p) bytes at off from the
// wrapped reader, cut at the size when known (io.EOF past it), and
// charges them to the budget; once the budget is spent it returns
// ErrReadBudget and reads nothing.
func (l *ReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	if l.size >= 0 {
		if off >= l.size {
			return 0, io.EOF
		}
		if rest := l.size - off; int64(len(p)) > rest {
			n, err := l.ReadAt(p[:rest], off)
			if err == nil {
				err = io.EOF
			}
			return n, err
		}
	}
	budget := l.budget.Add(-int64(len(p))) + int64(len(p)) // reserve
	if budget <= 0 {
		l.budget.Add(int64(len(p)))
		return 0, ErrReadBudget
	}
	if int64(len(p)) > budget {
		l.budget.Add(int64(len(p)) - budget) // give back what is not read
		p = p[:budget]
	}
	n, err := l.r.ReadAt(p, off)
	l.budget.Add(int64(len(p) - n))
	return n, err
}

// InFile reports whether the uncompressed bytes of s lie inside the
// file (always true when its size is unknown, or for SHT_NOBITS).
func (l *ReaderAt) InFile(s *elf.Section) bool {
	if l == nil || l.size < 0 || s.Type == elf.SHT_NOBITS {
		return true
	}
	return s.Offset <= uint64(l.size) && s.FileSize <= uint64(l.size)-s.Offset
}

// SectionData returns the contents of s, decompressed, when they are at
// most max bytes (after decompression) and lie inside the file.
func SectionData(lr *ReaderAt, s *elf.Section, max uint64) ([]byte, error) {
	if s.Type == elf.SHT_NOBITS {
		return nil, fmt.Errorf("section %s has no data", s.Name)
	}
	if !lr.InFile(s) {
		return nil, fmt.Errorf("section %s (offset %d, %d bytes) lies outside the file", s.Name, s.Offset, s.FileSize)
	}
	r := s.Open() // learns the size of a .zdebug section from its header
	if s.Size > max || s.FileSize > max {
		return nil, fmt.Errorf("section %s: %d bytes, over the cap of %d", s.Name, s.Size, max)
	}
	buf := make([]byte, 0, min(s.Size, 16<<20))
	w := &sliceWriter{buf}
	if _, err := io.Copy(w, io.LimitReader(r, int64(s.Size))); err != nil {
		return nil, fmt.Errorf("read section %s: %w", s.Name, err)
	}
	return w.buf, nil
}

// sliceWriter appends what is written to buf.
type sliceWriter struct{ buf []byte }

func (w *sliceWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	return len(p), nil
}

// CheckSymbolTable returns an error when the symbol table of type typ
// in f, or its string table, is over maxSymtabBytes or lies outside the
// file; nil when it is fine or absent.
func CheckSymbolTable(lr *ReaderAt, f *elf.File, typ elf.SectionType) error {
	s := f.SectionByType(typ)
	if s == nil {
		return nil
	}
	check := func(s *elf.Section) error {
		if s.Size > maxSymtabBytes || s.FileSize > maxSymtabBytes || !lr.InFile(s) {
			return fmt.Errorf("section %s (offset %d, %d bytes) is too large or lies outside the file", s.Name, s.Offset, s.FileSize)
		}
		return nil
	}
	if err := check(s); err != nil {
		return err
	}
	if int(s.Link) > 0 && int(s.Link) < len(f.Sections) {
		return check(f.Sections[s.Link])
	}
	return nil
}

// OpenELF parses the ELF headers of r, reading at most maxHeaderRead
// bytes for them, and returns the file with the reader that caps every
// later read (maxLoadRead in all).
func OpenELF(r io.ReaderAt) (*elf.File, *ReaderAt, error) {
	lr := NewReaderAt(r, maxHeaderRead)
	f, err := elf.NewFile(lr)
	if err != nil {
		return nil, nil, err
	}
	lr.budget.Store(maxLoadRead)
	return f, lr, nil
}

// Retain returns a reader of the same bytes, within what is left of l's
// budget, that stays valid after the caller closes what l wraps: for an
// *os.File, a reader of a duplicate of its descriptor (closed once the
// reader is unreachable); other readers (bytes in memory) are l itself.
// It returns nil when the descriptor cannot be duplicated.
func (l *ReaderAt) Retain() *ReaderAt {
	f, ok := l.r.(*os.File)
	if !ok {
		return l
	}
	sc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	fd := -1
	if sc.Control(func(raw uintptr) { fd, err = unix.FcntlInt(raw, unix.F_DUPFD_CLOEXEC, 0) }) != nil || err != nil {
		return nil
	}
	kept := &ReaderAt{r: os.NewFile(uintptr(fd), f.Name()), size: l.size}
	kept.budget.Store(l.budget.Load())
	return kept
}
