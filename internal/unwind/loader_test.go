package unwind

import (
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/gprofile/gprofile/internal/testutil"
)

// TestSeparateDebugFrame: a binary built with .debug_frame only (no
// unwind tables), stripped, finds its CFI in the separate debug file
// under ROOT/usr/lib/debug/.build-id/, compressed or not, and its stacks
// unwind whole.
func TestSeparateDebugFrame(t *testing.T) {
	objcopy := testutil.RequireTool(t, "objcopy")
	bin := testutil.BuildC(t, "testdata/stackdump.c", "-O2", "-g", "-fomit-frame-pointer", "-pthread",
		"-fno-asynchronous-unwind-tables", "-fno-unwind-tables", "-Wl,--build-id")
	run := func(args ...string) {
		if b, err := exec.Command(objcopy, args...).CombinedOutput(); err != nil {
			t.Fatalf("objcopy %v: %v\n%s", args, err, b)
		}
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	id := hex.EncodeToString(buildID(f))
	f.Close()
	if len(id) < 4 {
		t.Fatal("no build ID")
	}
	root := t.TempDir()
	dbg := filepath.Join(root, "usr/lib/debug/.build-id", id[:2], id[2:]+".debug")
	if err := os.MkdirAll(filepath.Dir(dbg), 0o755); err != nil {
		t.Fatal(err)
	}
	run("--only-keep-debug", "--compress-debug-sections=zlib", bin, dbg)
	// Strip the binary's own CFI: .debug_frame, and the .eh_frame of the
	// C runtime's objects, so that it has none.
	run("--strip-debug", "--remove-section=.eh_frame", "--remove-section=.eh_frame_hdr", bin)
	f, err = elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	own, err := NewTable(f)
	f.Close()
	if err != nil || own.HasCFI() {
		t.Fatalf("stripped binary: CFI %v, %v", own.HasCFI(), err)
	}
	tab, err := loadTable(bin, root)
	if err != nil || !tab.HasCFI() || tab.Rows() < 20 {
		t.Fatalf("with the debug file: %v, CFI %v, %d rows", err, tab.HasCFI(), tab.Rows())
	}
	// The walk through the test binary's frames uses it.
	d := stackDump(t, bin, "recurse")
	u := New(Options{})
	u.cache.get(bin, func() *Table { return tab })
	fs, stop := unwindFrames(t, u, d, bin)
	// _start's CFI was in the stripped .eh_frame; it is the binary's
	// entry point, whose stub ends the stack without CFI (inEntryStub).
	want := slices.Concat([]string{"deep_leaf"}, repeat("rec", 301), []string{"main", "_start"})
	if got := binNames(fs); !slices.Equal(got, want) || stop != StopComplete {
		t.Errorf("got %v, stop %v (want complete at _start)\n%s", got, stop, framesText(fs))
	}
}

// TestFramePointerObjects walks the test binary, built with frame
// pointers, as a JIT object (frame pointers only): the recursion comes out
// but for the frameless leaf's caller (GCC sets up no frame in deep_leaf
// even with -mno-omit-leaf-frame-pointer: the frame pointer still names
// rec(0)'s caller, so rec(0) is lost, as issue 13 says), and the libc
// frames above main unwind with CFI again, to _start.
func TestFramePointerObjects(t *testing.T) {
	bin := testutil.BuildC(t, "testdata/stackdump.c", "-O2", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer", "-pthread")
	d := stackDump(t, bin, "recurse")
	for i := range d.maps {
		if d.maps[i].path == bin {
			d.maps[i].obj.Kind = KindJIT
		}
	}
	u := New(Options{})
	fs, stop := unwindFrames(t, u, d, bin)
	want := slices.Concat([]string{"deep_leaf"}, repeat("rec", 300), []string{"main", "_start"})
	if got := binNames(fs); !slices.Equal(got, want) || stop != StopComplete {
		t.Errorf("got %v, stop %v\n%s", got, stop, framesText(fs))
	}
}

// TestTableCache: tables are built once per key however many goroutines
// ask, and the least recently used go first past the byte bound.
func TestTableCache(t *testing.T) {
	mk := func(rows int) *Table {
		return &Table{pcs: make([]uint32, rows), ids: make([]uint16, rows), rules: []rule{{}}}
	}
	size := mk(1000).Bytes() + 1
	c := newTableCache(3*size + 8) // keys of 2 bytes count too
	var mu sync.Mutex
	builds := map[string]int{}
	get := func(key string) *Table {
		return c.get(key, func() *Table {
			mu.Lock()
			builds[key]++
			mu.Unlock()
			return mk(1000)
		})
	}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			get(fmt.Sprint("k", i%2))
		}()
	}
	wg.Wait()
	if builds["k0"] != 1 || builds["k1"] != 1 {
		t.Fatalf("builds %v, want one per key", builds)
	}
	get("k2")
	get("k0") // k1 is now the least recently used
	get("k3")
	if n, b := c.stats(); n != 3 || b > 3*size+8 {
		t.Errorf("%d tables, %d bytes; want 3 within %d", n, b, 3*size)
	}
	u := &Unwinder{cache: c}
	if u.HasTable(Object{Key: "k1"}) || !u.HasTable(Object{Key: "k0"}) || !u.HasTable(Object{Kind: KindJIT}) {
		t.Errorf("HasTable: k1 %v (evicted), k0 %v, JIT %v", u.HasTable(Object{Key: "k1"}), u.HasTable(Object{Key: "k0"}), u.HasTable(Object{Kind: KindJIT}))
	}
	get("k1")
	if builds["k1"] != 2 || builds["k0"] != 1 {
		t.Errorf("builds %v: k1 should have been evicted, k0 kept", builds)
	}
}

// TestTableGoneWithProcess: a table whose /proc path went with its
// process is not kept under its key, so that another process of the
// same file (the same Key) builds it from its own path; a file that
// does not read elsewhere stays a failure read once.
func TestTableGoneWithProcess(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	u := New(Options{})
	gone := Object{Key: "same-build-id", Path: "/proc/2147483647/map_files/1000-2000"}
	if tab := u.Table(gone); tab.Stats().Err == nil {
		t.Fatalf("table of %s built, want an error", gone.Path)
	}
	if tab := u.Table(Object{Key: gone.Key, Path: self}); tab.Stats().Err != nil || !tab.HasCFI() {
		t.Fatalf("the same key from a live path: err %v, CFI %v; want the test binary's table", tab.Stats().Err, tab.HasCFI())
	}
	missing := Object{Key: "missing", Path: filepath.Join(t.TempDir(), "nothing")}
	u.Table(missing)
	if tab := u.Table(Object{Key: missing.Key, Path: self}); tab.Stats().Err == nil {
		t.Errorf("a path outside /proc that failed was built again; want its failure kept")
	}
	if n := u.Stats().Loads; n != 3 {
		t.Errorf("%d loads, want 3 (gone, live, missing)", n)
	}
}
