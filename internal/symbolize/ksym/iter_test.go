package ksym

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/gprofile/gprofile/internal/testutil"
)

// ksymEntry is one kallsyms symbol, from the iterator or the text file.
type ksymEntry struct {
	value        uint64
	typ          byte
	name, module string
}

func (e ksymEntry) String() string {
	return fmt.Sprintf("%016x %c %s [%s]", e.value, e.typ, e.name, e.module)
}

// decodeKsyms decodes the iterator records in b, which must be whole.
func decodeKsyms(b []byte) ([]ksymEntry, error) {
	var out []ksymEntry
	for len(b) > 0 {
		if len(b) < ksymRecHeader {
			return out, fmt.Errorf("record %d: %d bytes left, less than a header", len(out)+1, len(b))
		}
		n := int(binary.LittleEndian.Uint16(b[ksymRecNameLen:]))
		m := int(b[ksymRecModuleLen])
		if n == 0 || n > ksymRecMaxName || m > ksymRecMaxModule || len(b) < ksymRecHeader+n+m {
			return out, fmt.Errorf("record %d: bad header % x with %d bytes left", len(out)+1, b[:ksymRecHeader], len(b))
		}
		out = append(out, ksymEntry{
			value:  binary.LittleEndian.Uint64(b[ksymRecValue:]),
			typ:    b[ksymRecType],
			name:   string(b[ksymRecHeader : ksymRecHeader+n]),
			module: string(b[ksymRecHeader+n : ksymRecHeader+n+m]),
		})
		b = b[ksymRecHeader+n+m:]
	}
	return out, nil
}

// readKsyms reads the iterator to its end in 64 KiB reads, decoding each
// read by itself (each must hold whole records).
func readKsyms(t *testing.T) []ksymEntry {
	t.Helper()
	r, err := OpenIter()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var all []ksymEntry
	buf := make([]byte, 64<<10)
	for reads := 0; ; reads++ {
		n, err := r.Read(buf)
		recs, derr := decodeKsyms(buf[:n])
		if derr != nil {
			t.Fatalf("read %d (%d bytes): %v", reads, n, derr)
		}
		all = append(all, recs...)
		if err == io.EOF {
			return all
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// readKallsymsText parses /proc/kallsyms.
func readKallsymsText(t *testing.T) []ksymEntry {
	t.Helper()
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []ksymEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.SplitN(sc.Text(), " ", 3)
		v, err := strconv.ParseUint(fields[0], 16, 64)
		if len(fields) != 3 || len(fields[1]) != 1 || err != nil {
			t.Fatalf("malformed /proc/kallsyms line %q", sc.Text())
		}
		name, mod, _ := strings.Cut(fields[2], "\t")
		mod = strings.TrimSuffix(strings.TrimPrefix(mod, "["), "]")
		out = append(out, ksymEntry{v, fields[1][0], name, mod})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// withoutBPFProgs returns the entries that are not BPF programs, and the
// BPF programs by name.
func withoutBPFProgs(es []ksymEntry) (rest []ksymEntry, progs map[string]ksymEntry) {
	progs = make(map[string]ksymEntry)
	for _, e := range es {
		if e.module == "bpf" && strings.HasPrefix(e.name, "bpf_prog_") {
			progs[e.name] = e
			continue
		}
		rest = append(rest, e)
	}
	return rest, progs
}

// TestKallsymsIterMatchesText: the iterator lists what /proc/kallsyms
// lists, in its order, with the same addresses, type letters and
// modules. BPF programs loaded or unloaded between the two reads (by
// other processes) may differ, and only they; the iterator leaves out
// its own program.
func TestKallsymsIterMatchesText(t *testing.T) {
	testutil.RequirePrivileges(t)
	text := readKallsymsText(t)
	iter := readKsyms(t)
	textRest, textProgs := withoutBPFProgs(text)
	iterRest, iterProgs := withoutBPFProgs(iter)
	if len(iterRest) != len(textRest) {
		t.Errorf("iterator: %d symbols other than BPF programs; /proc/kallsyms: %d", len(iterRest), len(textRest))
	}
	for i := range min(len(iterRest), len(textRest)) {
		if iterRest[i] != textRest[i] {
			t.Fatalf("symbol %d: iterator %v, /proc/kallsyms %v", i, iterRest[i], textRest[i])
		}
	}
	same := 0
	for name, e := range iterProgs {
		if strings.HasSuffix(name, "_gprofile_ksym") {
			t.Errorf("the iterator lists its own program %v", e)
		}
		if te, ok := textProgs[name]; ok {
			same++
			if te != e {
				t.Errorf("BPF program: iterator %v, /proc/kallsyms %v", e, te)
			}
		}
	}
	t.Logf("%d symbols, %d of them BPF programs (%d in /proc/kallsyms, %d in both)", len(iter), len(iterProgs), len(textProgs), same)
	if len(iterRest) > 0 && iterRest[0].value == 0 && textRest[0].value != 0 {
		t.Errorf("iterator hides addresses that /proc/kallsyms shows")
	}
}

// TestKallsymsIterKptrRestrict: with kernel.kptr_restrict=2, which hides
// kallsyms addresses even from root, the iterator's addresses are all 0,
// as /proc/kallsyms's are. The old value is restored however the test
// ends; other readers of kallsyms meanwhile see it hidden too.
func TestKallsymsIterKptrRestrict(t *testing.T) {
	testutil.RequirePrivileges(t)
	restore := testutil.SetSysctl(t, "kernel.kptr_restrict", "2")
	iter := readKsyms(t)
	restore() // at once: other tests read kallsyms too
	nonzero := 0
	for _, e := range iter {
		if e.value != 0 {
			nonzero++
		}
	}
	if len(iter) < 1000 || nonzero != 0 {
		t.Errorf("kptr_restrict=2: %d symbols, %d with an address; want many, none", len(iter), nonzero)
	}
}

// TestKallsymsIterCloses: opening and closing the iterator leaves no file
// descriptor behind, read to its end or not.
func TestKallsymsIterCloses(t *testing.T) {
	testutil.RequirePrivileges(t)
	release := HoldKernelBTF() // decode BTF once for the loop
	defer release()
	runtime.GC()
	before := countFDs(t)
	for i := range 5 {
		r, err := OpenIter()
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if _, err := io.Copy(io.Discard, r); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if after := countFDs(t); after != before { // closed, not left to finalizers
		t.Errorf("%d open fds before, %d after 5 iterators opened and closed", before, after)
	}
}

// TestHoldKernelBTF: holders share one cache until the last releases it;
// release is idempotent.
func TestHoldKernelBTF(t *testing.T) {
	r1, r2 := HoldKernelBTF(), HoldKernelBTF()
	c := sharedKernelBTF()
	r1()
	r1()
	if sharedKernelBTF() != c || kernelBTFHeld != c {
		t.Error("released by one of two holders")
	}
	r2()
	kernelBTFMu.Lock()
	held, refs := kernelBTFHeld, kernelBTFRefs
	kernelBTFMu.Unlock()
	if held != nil || refs != 0 {
		t.Errorf("after both released: held %p, %d holders", held, refs)
	}
}

// BenchmarkOpenIter measures OpenIter and the read of
// its stream, with kernel BTF decoded once (warm) and per load (cold).
func BenchmarkOpenIter(b *testing.B) {
	testutil.RequirePrivileges(b)
	load := func(b *testing.B) {
		r, err := OpenIter()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, r); err != nil && !errors.Is(err, io.EOF) {
			b.Fatal(err)
		}
		r.Close()
	}
	b.Run("warm", func(b *testing.B) {
		defer HoldKernelBTF()()
		for b.Loop() {
			load(b)
		}
	})
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			runtime.GC() // drops the unheld BTF
			b.StartTimer()
			load(b)
		}
	})
}
