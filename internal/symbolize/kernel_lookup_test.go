package symbolize

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseSymbolText(t *testing.T) {
	for _, tt := range []struct {
		text, name, module string
		off                uint64
		ok                 bool
	}{
		{"do_syscall_64+0x10/0x140", "do_syscall_64", "", 0x10, true},
		{"ext4_readdir.cold+0x0/0x8 [ext4]", "ext4_readdir.cold", "ext4", 0, true},
		{"nf_hook_slow+0x3f/0xc0 [nf_tables 1a2b3c4d]", "nf_hook_slow", "nf_tables", 0x3f, true},
		{"bpf_prog_6deef7357e7b4530_lookup+0x4c/0x98", "bpf_prog_6deef7357e7b4530_lookup", "", 0x4c, true},
		{"a+b+0x1/0x2", "a+b", "", 1, true}, // the last "+0x" separates
		{"0xffffffff81000000", "", "", 0, false},
		{"0x1000", "", "", 0, false},
		{"", "", "", 0, false},
		{"+0x1/0x2", "", "", 0, false},
		{"name+0x1", "", "", 0, false},
		{"name+0xzz/0x2", "", "", 0, false},
		{"name+0x1/0xq", "", "", 0, false},
		{"two words+0x1/0x2", "", "", 0, false},
		{"trunc+0x1/0x2 [mod", "", "", 0, false},
	} {
		name, off, module, ok := parseSymbolText(tt.text)
		if name != tt.name || off != tt.off || module != tt.module || ok != tt.ok {
			t.Errorf("parseSymbolText(%q) = %q, %#x, %q, %v; want %q, %#x, %q, %v",
				tt.text, name, off, module, ok, tt.name, tt.off, tt.module, tt.ok)
		}
	}
}

func FuzzParseSymbolText(f *testing.F) {
	for _, s := range []string{"do_syscall_64+0x10/0x140", "x.cold+0x0/0x8 [ext4]", "0x1000", "a+b+0x1/0x2 [m b]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		name, _, module, ok := parseSymbolText(text)
		if !ok {
			return
		}
		if name == "" || !strings.HasPrefix(text, name+"+0x") || strings.ContainsAny(name, " \t\n") {
			t.Errorf("parseSymbolText(%q): name %q", text, name)
		}
		if module != "" && !strings.Contains(text, " ["+module) {
			t.Errorf("parseSymbolText(%q): module %q", text, module)
		}
	})
}

// fakeLookup is a KernelLookup that names addresses from a table of
// symbols and counts its calls.
type fakeLookup struct {
	syms       []fakeSym // sorted by start
	start, end uint64
	calls      [][]uint64 // the addrs of each Lookup
	fail       bool
	closed     int
}

type fakeSym struct {
	name, module string
	start, size  uint64
}

func (l *fakeLookup) Lookup(addrs []uint64, texts []string) error {
	l.calls = append(l.calls, slices.Clone(addrs))
	if l.fail {
		return errors.New("run failed")
	}
	for i, a := range addrs {
		texts[i] = fmt.Sprintf("%#x", a)
		for _, s := range l.syms {
			if s.start <= a && a < s.start+s.size {
				texts[i] = fmt.Sprintf("%s+%#x/%#x", s.name, a-s.start, s.size)
				if s.module != "" {
					texts[i] += " [" + s.module + "]"
				}
			}
		}
	}
	return nil
}

func (l *fakeLookup) TextRange() (uint64, uint64) { return l.start, l.end }
func (l *fakeLookup) Close() error                { l.closed++; return nil }

// TestKernelLookupStack: with a KernelLookup, kernel frames are named
// from its texts (function, start, module mapping from
// <ProcRoot>/modules), each stack's new addresses go in one call (return
// addresses moved back by one, repeats asked once, cached ones never
// again), addresses it cannot name are unnamed with the right mapping,
// kallsyms is never read, and Close closes it.
func TestKernelLookupStack(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "modules"), []byte("ext4 65536 2 - Live 0xffffffffc0300000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fake := &fakeLookup{
		start: 0xffffffff81000000, end: 0xffffffff82000000,
		syms: []fakeSym{
			{"entry_SYSCALL_64", "", 0xffffffff81000100, 0x100},
			{"do_syscall_64", "", 0xffffffff81001000, 0x200},
			{"ext4_read", "ext4", 0xffffffffc0300100, 0x80},
			{"bpf_prog_0123456789abcdef_x", "", 0xffffffffa0001000, 0x40},
		},
	}
	s, err := New(Options{
		ProcRoot:     root,
		KallsymsPath: filepath.Join(root, "no-kallsyms"), // must not be needed
		KernelLookup: func() (KernelLookup, error) { return fake, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if note := s.Note(); note != "" {
		t.Errorf("Note() = %q, want none", note)
	}
	ips := []uint64{0xffffffffc0300110, 0xffffffff81001011, 0xffffffff81001011, 0xffffffffa0001008, 0xffffffff81800000, 0xffffffff90000001, 0xffffffff81000150}
	st := s.Stack(1, ips, nil)
	want := []struct {
		function string
		start    uint64
		path     string
		reason   Reason
	}{
		{"ext4_read", 0xffffffffc0300100, "[ext4]", ReasonNone},
		{"do_syscall_64", 0xffffffff81001000, kernelPath, ReasonNone},
		{"do_syscall_64", 0xffffffff81001000, kernelPath, ReasonNone},
		{"bpf_prog_0123456789abcdef_x", 0xffffffffa0001000, kernelPath, ReasonNone}, // outside _stext.._etext
		{"", 0, kernelPath, ReasonNoSymbol},
		{"", 0, "", ReasonNoMapping},
		{"entry_SYSCALL_64", 0xffffffff81000100, kernelPath, ReasonNone},
	}
	if len(st.Frames) != len(want) {
		t.Fatalf("%d frames, want %d", len(st.Frames), len(want))
	}
	for i, w := range want {
		f := st.Frames[i]
		path := ""
		if f.Mapping != nil {
			path = f.Mapping.Path
		}
		if f.Function != w.function || f.SymbolStart != w.start || path != w.path || f.Reason != w.reason || f.Address != ips[i] || !f.Kernel {
			t.Errorf("frame %d = %+v (mapping %q); want %s at %#x in %q, reason %v", i, f, path, w.function, w.start, w.path, w.reason)
		}
	}
	if f := st.Frames[1]; f.Mapping.Start != fake.start || f.Mapping.Limit != fake.end {
		t.Errorf("kernel mapping [%#x, %#x), want the lookup's text range", f.Mapping.Start, f.Mapping.Limit)
	}
	if f := st.Frames[0]; f.Mapping.Start != 0xffffffffc0300000 || f.Mapping.Limit != 0xffffffffc0310000 {
		t.Errorf("ext4 mapping [%#x, %#x), want /proc/modules' extent", f.Mapping.Start, f.Mapping.Limit)
	}
	wantCall := []uint64{0xffffffffc0300110, 0xffffffff81001010, 0xffffffffa0001007, 0xffffffff817fffff, 0xffffffff90000000, 0xffffffff8100014f}
	if len(fake.calls) != 1 || !slices.Equal(fake.calls[0], wantCall) {
		t.Fatalf("Lookup calls %#x, want one of %#x", fake.calls, wantCall)
	}
	// Cached addresses are not asked again; a new one alone is.
	s.Stack(2, []uint64{0xffffffffc0300110, 0xffffffff81001101}, nil)
	if len(fake.calls) != 2 || !slices.Equal(fake.calls[1], []uint64{0xffffffff81001100}) {
		t.Errorf("second Lookup calls %#x, want only 0xffffffff81001100", fake.calls[1:])
	}
	if err := s.Close(); err != nil || fake.closed != 1 {
		t.Errorf("Close() = %v, lookup closed %d times; want nil, once", err, fake.closed)
	}
}

// TestKernelLookupFallback: a KernelLookup that cannot open leaves the
// kallsyms listing in charge (its error in the note when that fails
// too); one whose runs fail leaves frames unnamed, never misnamed.
func TestKernelLookupFallback(t *testing.T) {
	const abort = 0xffffffff81001010 // abort in testdata/kallsyms.txt
	refuse := func() (KernelLookup, error) { return nil, errors.New("no syscall programs") }
	k := newKernelSymbolizer(refuse, nil, "testdata/kallsyms.txt", t.TempDir(), "")
	if fi := k.resolve(abort); fi.function != "abort" || k.note != "" {
		t.Errorf("lookup refused: resolve = %q, note %q; want abort from kallsyms, no note", fi.function, k.note)
	}
	k = newKernelSymbolizer(refuse, nil, "testdata/missing", t.TempDir(), "")
	if fi := k.resolve(abort); fi.reason != ReasonNoSymbol || !strings.Contains(k.note, "no syscall programs") {
		t.Errorf("both fail: resolve reason %v, note %q; want no-symbol and the lookup's error", fi.reason, k.note)
	}
	fake := &fakeLookup{fail: true, start: 0xffffffff81000000, end: 0xffffffff82000000,
		syms: []fakeSym{{"abort", "", 0xffffffff81001000, 0x100}}}
	k = newKernelSymbolizer(func() (KernelLookup, error) { return fake, nil }, nil, "testdata/kallsyms.txt", t.TempDir(), "")
	k.prefetch([]uint64{abort})
	if fi := k.resolve(abort); fi.function != "" || fi.reason != ReasonNoSymbol {
		t.Errorf("failing runs: resolve = %+v, want unnamed (no-symbol)", fi)
	}
}
