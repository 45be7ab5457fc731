package unwind

import (
	"debug/elf"
	"encoding/binary"
	"testing"
)

// ldso is Debian 12's dynamic loader, whose entry point (_start, then
// _dl_start_user: glibc's RTLD_START) has no CFI.
const ldso = "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"

// ldsoProcess maps every pc to ld.so, loaded at bias 0.
type ldsoProcess struct{ t *Table }

func (p ldsoProcess) Object(pc uint64) (Object, bool) {
	return Object{Key: "ld.so", Table: p.t}, true
}

// TestEntryStub: a sample in _dl_start, called by the dynamic loader's
// _start at the process's first instruction, unwinds whole to the stub
// at ld.so's entry point, which has no CFI (it was cut there, as no-cfi:
// every dynamically linked process's first samples). Only the stub's
// first entryStubBytes count.
func TestEntryStub(t *testing.T) {
	f, err := elf.Open(ldso)
	if err != nil {
		t.Fatalf("%v (Debian's libc6 installs it)", err)
	}
	defer f.Close()
	tab, err := NewTable(f)
	if err != nil {
		t.Fatal(err)
	}
	entry := f.Entry
	if entry == 0 || tab.entry != entry {
		t.Fatalf("table's entry %#x, ELF e_entry %#x", tab.entry, entry)
	}
	// _start: mov %rsp, %rdi (48 89 e7); call _dl_start (e8 rel32).
	code := make([]byte, 8)
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && entry >= p.Vaddr && entry+8 <= p.Vaddr+p.Filesz {
			if _, err := p.ReadAt(code, int64(entry-p.Vaddr)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if code[0] != 0x48 || code[1] != 0x89 || code[2] != 0xe7 || code[3] != 0xe8 {
		t.Fatalf("ld.so's entry point holds % x, want mov %%rsp,%%rdi; call _dl_start (glibc's RTLD_START)", code)
	}
	dlStart := entry + 8 + uint64(int64(int32(binary.LittleEndian.Uint32(code[4:]))))
	if _, _, ok := tab.lookup(entry + 8); ok {
		t.Fatalf("ld.so's _dl_start_user (%#x) has CFI: the stub rule is not what ends this stack", entry+8)
	}
	// At _dl_start's first instruction, sp holds the return address into
	// _dl_start_user; rbp is 0, as the kernel starts a process.
	stack := make([]byte, 64)
	binary.LittleEndian.PutUint64(stack, entry+8)
	var regs Regs
	regs[RegRIP], regs[RegRSP] = dlStart, 0x7ffc00001000
	u := New(Options{})
	ips, stop, _ := u.UnwindSwitch(nil, ldsoProcess{tab}, &regs, stack, StackSwitch{})
	if stop != StopComplete || len(ips) != 2 || ips[1] != entry+8 {
		t.Errorf("unwind from _dl_start (%#x): %#x, %v; want [%#x %#x], complete", dlStart, ips, stop, dlStart, entry+8)
	}
	for _, c := range []struct {
		pc   uint64
		want bool
	}{{entry - 1, false}, {entry, true}, {entry + entryStubBytes - 1, true}, {entry + entryStubBytes, false}} {
		if got := tab.inEntryStub(c.pc); got != c.want {
			t.Errorf("inEntryStub(entry%+d) = %v, want %v", int64(c.pc-entry), got, c.want)
		}
	}
}
