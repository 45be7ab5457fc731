package symbolize

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// memoRoot makes a ProcRoot with one module and the boot ID boot.
func memoRoot(t *testing.T, boot string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "sys/kernel/random"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "sys/kernel/random/boot_id"), []byte(boot+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "modules"), []byte("ext4 65536 2 - Live 0xffffffffc0300000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func memoLookup(end uint64) *fakeLookup {
	return &fakeLookup{
		start: 0xffffffff81000000, end: end,
		syms: []fakeSym{
			{"entry_SYSCALL_64", "", 0xffffffff81000100, 0x100},
			{"do_syscall_64", "", 0xffffffff81001000, 0x200},
			{"ext4_read", "ext4", 0xffffffffc0300100, 0x80},
			{"bpf_prog_0123456789abcdef_x", "", 0xffffffffa0001000, 0x40},
		},
	}
}

// memoIPs is a kernel callchain, leaf first: a module's address, the
// image's (twice), a BPF program's, an image address no symbol covers,
// one outside every mapping, and the image's again.
var memoIPs = []uint64{0xffffffffc0300110, 0xffffffff81001011, 0xffffffff81001011, 0xffffffffa0001008, 0xffffffff81800000, 0xffffffff90000001, 0xffffffff81000150}

// memoRun symbolizes memoIPs with a new Symbolizer over root and cache
// and closes it; it returns the frames as text and the lookup's calls.
func memoRun(t *testing.T, root, cache string, fake *fakeLookup) ([]string, [][]uint64) {
	t.Helper()
	s, err := New(Options{
		ProcRoot:     root,
		KallsymsPath: filepath.Join(root, "no-kallsyms"),
		KernelLookup: func() (KernelLookup, error) { return fake, nil },
		CacheDir:     cache,
	})
	if err != nil {
		t.Fatal(err)
	}
	st := s.Stack(1, memoIPs, nil)
	var frames []string
	for _, f := range st.Frames {
		path, lo, hi := "", uint64(0), uint64(0)
		if f.Mapping != nil {
			path, lo, hi = f.Mapping.Path, f.Mapping.Start, f.Mapping.Limit
		}
		frames = append(frames, fmt.Sprintf("%s@%#x %s[%#x,%#x) %v", f.Function, f.SymbolStart, path, lo, hi, f.Reason))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return frames, fake.calls
}

// TestKernelMemo: a second run of one boot names the image's addresses
// from the first run's memo, frame for frame as the lookup did, and asks
// the lookup only for the others (module, BPF, unnamed); another boot ID,
// another text range or a corrupt entry leave it asking for all of them
// again.
func TestKernelMemo(t *testing.T) {
	const boot = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	const end = 0xffffffff82000000
	root, cache := memoRoot(t, boot), t.TempDir()
	first, calls := memoRun(t, root, cache, memoLookup(end))
	all := []uint64{0xffffffffc0300110, 0xffffffff81001010, 0xffffffffa0001007, 0xffffffff817fffff, 0xffffffff90000000, 0xffffffff8100014f}
	if len(calls) != 1 || !slices.Equal(calls[0], all) {
		t.Fatalf("first run: Lookup calls %#x, want one of %#x", calls, all)
	}
	entry := filepath.Join(cache, "kernel-"+boot, kernelMemoName)
	if _, err := os.Stat(entry); err != nil {
		t.Fatalf("first run saved no memo: %v", err)
	}

	again, calls := memoRun(t, root, cache, memoLookup(end))
	notImage := []uint64{0xffffffffc0300110, 0xffffffffa0001007, 0xffffffff817fffff, 0xffffffff90000000}
	if len(calls) != 1 || !slices.Equal(calls[0], notImage) {
		t.Errorf("second run: Lookup calls %#x, want one of %#x (the image's named from the memo)", calls, notImage)
	}
	if !slices.Equal(again, first) {
		t.Errorf("second run's frames\n%q\nwant the first's\n%q", again, first)
	}

	// run checks one more run: its lookup calls, and its frames against
	// the first run's when it has the first's text range.
	run := func(name, root string, end uint64, want []uint64) {
		t.Helper()
		frames, calls := memoRun(t, root, cache, memoLookup(end))
		if len(calls) != 1 || !slices.Equal(calls[0], want) {
			t.Errorf("%s: Lookup calls %#x, want one of %#x", name, calls, want)
		}
		if end == 0xffffffff82000000 && !slices.Equal(frames, first) {
			t.Errorf("%s: frames\n%q\nwant\n%q", name, frames, first)
		}
	}
	data, err := os.ReadFile(entry)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-1] ^= 0xff // the CRC no longer checks out
	if err := os.WriteFile(entry, data, 0o600); err != nil {
		t.Fatal(err)
	}
	run("corrupt entry", root, end, all)
	run("after the corrupt entry", root, end, notImage) // saved again
	run("another boot", memoRoot(t, "11111111-2222-3333-4444-555555555555"), end, all)
	run("another text range", root, end+0x1000, all)
	run("that range again", root, end+0x1000, notImage)
	run("the first range again", root, end, all)
}

// TestKernelMemoNoBootID: without a readable boot ID there is no memo,
// and every run asks the lookup.
func TestKernelMemoNoBootID(t *testing.T) {
	root, cache := memoRoot(t, "not a boot id!"), t.TempDir()
	for range 2 {
		if _, calls := memoRun(t, root, cache, memoLookup(0xffffffff82000000)); len(calls) != 1 || len(calls[0]) != 6 {
			t.Errorf("Lookup calls %#x, want one of 6 addresses", calls)
		}
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Errorf("cache holds %d entries, want none", len(ents))
	}
}

func TestKernelMemoCodec(t *testing.T) {
	texts := map[uint64]string{0x1000: "a+0x0/0x10", 0x1001: "a+0x1/0x10", 0x1fff: "z+0x3/0x4"}
	data := encodeKernelMemo(0x1000, 0x2000, texts)
	start, end, got, err := decodeKernelMemo(data)
	if err != nil || start != 0x1000 || end != 0x2000 || !maps.Equal(got, texts) {
		t.Fatalf("decode(encode) = %#x, %#x, %v, %v; want the input", start, end, got, err)
	}
	for i := range data {
		if _, _, _, err := decodeKernelMemo(data[:i]); err == nil {
			t.Errorf("decode of the first %d of %d bytes: no error", i, len(data))
		}
	}
	if _, _, _, err := decodeKernelMemo(encodeKernelMemo(0x1000, 0x1800, texts)); err == nil {
		t.Error("decode of an address past the range's end: no error")
	}
}

// TestKernelMemoBound: a full memo takes no more texts, and a memo
// that says it holds more than the bound is refused.
func TestKernelMemoBound(t *testing.T) {
	m := &kernelMemo{}
	m.use(0x1000, 0x1000+2*maxKernelMemoEntries)
	for i := range maxKernelMemoEntries + 10 {
		m.add(0x1000+uint64(i), "f+0x0/0x1")
	}
	if len(m.texts) != maxKernelMemoEntries || m.added != maxKernelMemoEntries {
		t.Errorf("memo holds %d texts (%d added), want the bound %d", len(m.texts), m.added, maxKernelMemoEntries)
	}
	m.texts[0x1000+maxKernelMemoEntries] = "f+0x0/0x1" // one past the bound, as a hostile file could hold
	if _, _, _, err := decodeKernelMemo(encodeKernelMemo(m.start, m.end, m.texts)); err == nil {
		t.Error("decode of a memo past the bound: no error")
	}
}

func FuzzDecodeKernelMemo(f *testing.F) {
	f.Add(encodeKernelMemo(0x1000, 0x2000, map[uint64]string{0x1000: "a+0x0/0x10", 0x1fff: "z+0x3/0x4"}))
	f.Add([]byte(kernelMemoMagic + "\x01\x02\x01\x00\x01a"))
	f.Fuzz(func(t *testing.T, data []byte) {
		start, end, texts, err := decodeKernelMemo(data)
		if err != nil {
			return
		}
		for a := range texts {
			if a < start || a >= end {
				t.Fatalf("address %#x outside [%#x, %#x)", a, start, end)
			}
		}
		s2, e2, t2, err := decodeKernelMemo(encodeKernelMemo(start, end, texts))
		if err != nil || s2 != start || e2 != end || !maps.Equal(t2, texts) {
			t.Fatalf("re-encoding does not decode to the same memo: %v", err)
		}
	})
}

// BenchmarkKernelMemo measures what the memo costs a run that reads it:
// openKernelMemo of a memo of 1000 texts (the kernel addresses of a few
// busy runs), per memo read; against it stands a lookup per new address
// (ksym's BenchmarkKernelSymbolLookup).
func BenchmarkKernelMemo(b *testing.B) {
	const boot = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	root, cache := b.TempDir(), b.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "sys/kernel/random"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "sys/kernel/random/boot_id"), []byte(boot+"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	m := openKernelMemo(cache, root)
	m.use(0xffffffff81000000, 0xffffffff83000000)
	for i := range 1000 {
		m.add(0xffffffff81000000+uint64(i)*0x731, fmt.Sprintf("some_kernel_function_%d+0x%x/0x%x", i, i%0x80, 0x100+i%0x80))
	}
	m.save()
	b.ReportAllocs()
	for b.Loop() {
		m := openKernelMemo(cache, root)
		if m.use(0xffffffff81000000, 0xffffffff83000000); len(m.texts) != 1000 {
			b.Fatal("memo not read")
		}
	}
}
