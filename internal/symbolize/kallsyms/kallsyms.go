package kallsyms

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
)

// maxKernelTail bounds, in bytes, how far past its start a kernel symbol
// may cover when nothing else bounds it: the last symbol of a module whose
// extent /proc/modules did not give, or a symbol outside the kernel text.
// kallsyms has no sizes; no kernel function comes near this length.
const maxKernelTail = 1 << 20

// Symbol is one kernel function as /proc/kallsyms lists it.
type Symbol struct {
	// Name is the symbol name, such as "do_syscall_64" or
	// "bpf_prog_6deef7357e7b4530_sd_fw_egress".
	Name string
	// Start is the kernel virtual address of the symbol's first byte.
	Start uint64
	// Module is the module that holds it ("ext4", "bpf" for BPF
	// programs), "" for the kernel image.
	Module string
}

// ksym is one kept kallsyms line, 16 bytes; the name is
// names[name:name+nlen&ksymNameMask]. A name that ends the name of the
// symbol listed just before it ("abort" after "__pfx_abort") points into
// that name rather than being stored again: with the kernel's 16-byte
// function padding every function has a __pfx_ symbol, and this sharing
// saves 40% of the names' memory.
type ksym struct {
	addr uint64
	name uint32 // offset in Kallsyms.names
	nlen uint16 // name length, and ksymGlobal
	mod  uint16 // index in Kallsyms.modules; 0 is the kernel image
}

const (
	// ksymGlobal marks, in ksym.nlen, an upper-case type letter (T, W).
	ksymGlobal = 1 << 15
	// ksymNameMask masks the name length out of ksym.nlen; longer names
	// (the kernel's limit is 512 bytes) are malformed.
	ksymNameMask = ksymGlobal - 1
)

func (s *ksym) global() bool { return s.nlen&ksymGlobal != 0 }

// AddrRange is a half-open range of addresses [start, end).
type AddrRange struct{ Start, End uint64 }

func (r AddrRange) contains(a uint64) bool { return r.Start <= a && a < r.End }

// Table is the kernel's function symbol table, from /proc/kallsyms:
// text symbols (types t, T, w, W) of the kernel image and of loaded
// modules, and BPF programs (bpf_prog_*), sorted by address. kallsyms has
// no sizes, so a symbol covers the addresses up to the next symbol, cut at
// the end of the kernel text (_etext), of the init text (_einittext) or
// of its module (when LoadModules gave it), and never more than 1 MiB
// past its start.
//
// A Kallsyms is read-only once built (and LoadModules called, if at all)
// and then safe for concurrent use.
type Table struct {
	syms    []ksym
	names   string
	modules []string // modules[0] == "", the kernel image
	text    AddrRange
	init    AddrRange
	modEnd  map[uint16]AddrRange // module extents from /proc/modules
	hidden  bool
}

// Load reads and parses a file in /proc/kallsyms format, normally
// "/proc/kallsyms". It returns the error of opening, reading or parsing
// the file (see ParseKallsyms). When kernel.kptr_restrict hides the
// addresses it succeeds and Hidden reports true.
//
// Reading the real file costs the kernel a vsnprintf and a symbol-name
// decompression per line, one page per read call whatever the buffer
// size (BenchmarkKallsymsRead), so one goroutine reads while the calling
// one parses what has arrived: the load takes about as long as the read
// alone (BenchmarkKallsymsLoad, which reports the table's heap bytes).
func Load(path string) (*Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load kallsyms: %w", err)
	}
	defer f.Close()
	k, err := loadKallsyms(f, kallsymsChunk)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	return k, nil
}

// Parse parses /proc/kallsyms text: lines of
// "ffffffff81000000 T _stext", with "\t[module]" after module symbols.
// It returns an error when reading fails, when a line is malformed (it
// names the line) or longer than 64 KiB, or when there are no lines at
// all. Zero addresses on every line are not an error: Hidden then
// reports true. r is read on a goroutine of its own, never after
// ParseKallsyms returns.
func Parse(r io.Reader) (*Table, error) {
	return loadKallsyms(r, kallsymsChunk)
}

// Hidden reports that every address in the file was zero: the kernel
// hides them (kernel.kptr_restrict=1 for readers without CAP_SYSLOG, or
// kptr_restrict=2 for everyone), and no kernel address can be named.
func (k *Table) Hidden() bool { return k.hidden }

// Len returns the number of symbols kept.
func (k *Table) Len() int { return len(k.syms) }

// TextRange returns the kernel image's text [start, end) from _stext (or
// _text) and _etext, as kernel virtual addresses. ok is false when the
// file lacks them or hides addresses.
func (k *Table) TextRange() (start, end uint64, ok bool) {
	return k.text.Start, k.text.End, k.text.End > k.text.Start
}

// Lookup returns the symbol that covers the kernel address addr: the
// nearest symbol at or below addr, if addr is before the next symbol and
// inside the region (kernel text, init text, module) that symbol lies in.
// ok is false before the first symbol, past a region's end, and always
// when Hidden.
func (k *Table) Lookup(addr uint64) (sym Symbol, ok bool) {
	i := k.search(addr)
	if i < 0 || addr >= k.symEnd(i) {
		return Symbol{}, false
	}
	s := &k.syms[i]
	return Symbol{
		Name:   k.names[s.name : s.name+uint32(s.nlen&ksymNameMask)],
		Start:  s.addr,
		Module: k.modules[s.mod],
	}, true
}

// search returns the index of the last symbol at or below addr, or -1.
func (k *Table) search(addr uint64) int {
	lo, hi := 0, len(k.syms)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if k.syms[m].addr <= addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo - 1
}

// symEnd returns the first address past symbol i: the next symbol, cut at
// the end of the region the symbol lies in.
func (k *Table) symEnd(i int) uint64 {
	s := &k.syms[i]
	end := s.addr + maxKernelTail
	switch r, ok := k.modEnd[s.mod]; {
	case s.mod == 0 && k.text.contains(s.addr):
		end = k.text.End
	case s.mod == 0 && k.init.contains(s.addr):
		end = k.init.End
	case s.mod != 0 && ok && r.contains(s.addr):
		end = r.End
	}
	if i+1 < len(k.syms) && k.syms[i+1].addr < end {
		end = k.syms[i+1].addr
	}
	return end
}

// sortTail sorts the symbols by address when syms[:from] is sorted
// already, as when only the BPF programs at the end of kallsyms are out
// of order (the kernel lists them newest first): it sorts syms[from:]
// and merges the two runs, keeping a symbol of the first run before an
// equal one of the second, then drops duplicates. O(n) plus the sort of
// the tail, where sortSyms is O(n log n).
func (k *Table) sortTail(from int) {
	if from <= 0 || from > len(k.syms) || len(k.syms)-from > len(k.syms)/2 {
		k.sortSyms()
		return
	}
	byAddr := func(a, b ksym) int { return cmp.Compare(a.addr, b.addr) }
	tail := slices.Clone(k.syms[from:])
	slices.SortStableFunc(tail, byAddr)
	// Merge from the back into k.syms: the head stays in place until
	// overwritten, and every write lands at or past the head's unread end.
	i, j, w := from-1, len(tail)-1, len(k.syms)-1
	for j >= 0 {
		if i >= 0 && k.syms[i].addr > tail[j].addr {
			k.syms[w] = k.syms[i]
			i--
		} else {
			k.syms[w] = tail[j]
			j--
		}
		w--
	}
	k.dedup()
}

// sortSyms sorts the symbols by address, for files not in order, then
// drops duplicates. The sort is stable so that dedup keeps the first
// listed of equal names.
func (k *Table) sortSyms() {
	slices.SortStableFunc(k.syms, func(a, b ksym) int {
		switch {
		case a.addr < b.addr:
			return -1
		case a.addr > b.addr:
			return 1
		}
		return 0
	})
	k.dedup()
}

// errNoKallsyms is returned for an empty kallsyms file.
var errNoKallsyms = errors.New("no symbols")

// Module is the extent of one kernel module (or of the BPF
// programs, module "bpf") in kernel virtual addresses.
type Module struct {
	Name       string // module name as kallsyms writes it, without brackets
	Start, End uint64 // [Start, End), bytes
}

// Modules returns the modules that have symbols, in kallsyms order. The
// extent comes from LoadModules where it gave one, else it runs from the
// module's first symbol to its last symbol's end (an estimate: kallsyms has
// no sizes). It is empty when Hidden.
func (k *Table) Modules() []Module {
	if len(k.modules) <= 1 || len(k.syms) == 0 {
		return nil
	}
	mods := make([]Module, len(k.modules))
	for i := range k.syms {
		s := &k.syms[i]
		m := &mods[s.mod]
		if m.End == 0 {
			m.Start = s.addr
		}
		m.End = max(m.End, k.symEnd(i))
	}
	out := mods[:0]
	for i, m := range mods {
		if i == 0 || m.End == 0 {
			continue
		}
		m.Name = k.modules[i]
		if r, ok := k.modEnd[uint16(i)]; ok {
			m.Start, m.End = r.Start, r.End
		}
		out = append(out, m)
	}
	return out
}
