package elfio

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

// TestMapFileDiscard: a Mapping of a file range that starts inside a
// page reads the file's bytes; Discard drops only the whole pages inside
// the range it is given and says which; the bytes read the same after,
// from the file, also once the file is closed.
func TestMapFileDiscard(t *testing.T) {
	page := os.Getpagesize()
	want := make([]byte, 5*page)
	for i := range want {
		want[i] = byte(i*7 + i/page)
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, want, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	const off = 100
	m := MapFile(f, off, uint64(len(want)-off))
	f.Close()
	if m == nil {
		t.Fatal("MapFile: nil")
	}
	if !bytes.Equal(m.Data, want[off:]) {
		t.Fatal("the mapping does not read the file's bytes")
	}
	// Data[0] is file byte 100: the first whole page of Data[0:3 pages)
	// is file page 1, the last before Data's 3*page (file byte 3*page+100) is page 2.
	lo, hi := m.Discard(0, 3*page)
	if lo != page-off || hi != 3*page-off {
		t.Errorf("Discard(0, 3 pages) dropped [%d, %d); want [%d, %d)", lo, hi, page-off, 3*page-off)
	}
	if lo, hi := m.Discard(10, page-20); lo != 0 || hi != 0 {
		t.Errorf("Discard inside one page dropped [%d, %d); want nothing", lo, hi)
	}
	if !bytes.Equal(m.Data, want[off:]) {
		t.Error("after Discard the mapping does not read the file's bytes")
	}
	if MapFile(f, 0, 0) != nil {
		t.Error("MapFile of 0 bytes: want nil")
	}
}

// sink keeps a test's read of mapped memory from being optimized away.
var sink byte

// TestRecoverFault: a read of a mapped page past the end of a truncated
// file is a fault RecoverFault recovers under debug.SetPanicOnFault; any
// other panic goes on.
func TestRecoverFault(t *testing.T) {
	page := os.Getpagesize()
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, make([]byte, 3*page), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	m := MapFile(f, 0, uint64(3*page))
	f.Close()
	if m == nil {
		t.Fatal("MapFile: nil")
	}
	if err := os.Truncate(path, int64(page)); err != nil {
		t.Fatal(err)
	}
	faulted := func() (got bool) {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() { got = RecoverFault(recover()) }()
		sink = m.Data[2*page]
		return false
	}()
	if !faulted {
		t.Error("reading past the truncated end: no fault recovered")
	}
	other := func() (p any) {
		defer func() { p = recover() }()
		defer func() { RecoverFault(recover()) }()
		panic("not a fault")
	}()
	if other != "not a fault" {
		t.Errorf("RecoverFault on another panic: the panic became %v; want it to go on", other)
	}
}
