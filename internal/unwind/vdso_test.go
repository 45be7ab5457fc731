package unwind

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"testing"
)

// TestVDSOTable reads this process's vDSO image, checks that it is linked
// at virtual address 0 (so Object.Bias is the [vdso] mapping's start, as
// SEAM.md tells callers), and compares its CFA table with readelf's.
func TestVDSOTable(t *testing.T) {
	img, err := vdsoImage()
	if err != nil {
		t.Fatalf("read own vDSO: %v", err)
	}
	f, err := elf.NewFile(bytes.NewReader(img))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Vaddr != 0 {
			t.Errorf("vDSO's first PT_LOAD at vaddr %#x, want 0", p.Vaddr)
		}
		if p.Type == elf.PT_LOAD {
			break
		}
	}
	u := New(Options{})
	tab := u.Table(Object{Key: "vdso", Kind: KindVDSO})
	if !tab.HasCFI() || tab.Rows() == 0 {
		t.Fatalf("vDSO table: CFI %v, %d rows, %v", tab.HasCFI(), tab.Rows(), tab.Stats().Err)
	}
	path := filepath.Join(t.TempDir(), "vdso.so")
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d rows compared", compareReadelf(t, path, ".eh_frame"))
}
