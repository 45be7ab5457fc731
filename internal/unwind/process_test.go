package unwind

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// dump is what testdata/stackdump.c writes: registers, the stack window
// and the process's maps.
type dump struct {
	regs  Regs
	stack []byte
	maps  []mapping
}

type mapping struct {
	lo, hi, off uint64
	path        string
	obj         Object
}

func readDump(t testing.TB, path string) *dump {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 8+18*8 || string(b[:8]) != "STKDUMP1" {
		t.Fatalf("%s: not a stack dump", path)
	}
	d := &dump{}
	for i := range d.regs {
		d.regs[i] = binary.LittleEndian.Uint64(b[8+8*i:])
	}
	n := binary.LittleEndian.Uint64(b[8+17*8:])
	rest := b[8+18*8:]
	if n > uint64(len(rest)) {
		t.Fatalf("%s: stack of %d bytes, file holds %d", path, n, len(rest))
	}
	d.stack = rest[:n]
	d.maps = parseMaps(t, rest[n:])
	return d
}

// parseMaps reads /proc/PID/maps text into mappings with their Objects
// (file-backed ones and the vDSO).
func parseMaps(t testing.TB, text []byte) []mapping {
	var out []mapping
	biases := map[string][]elf.ProgHeader{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		var m mapping
		m.lo, _ = strconv.ParseUint(lo, 16, 64)
		m.hi, _ = strconv.ParseUint(hi, 16, 64)
		m.off, _ = strconv.ParseUint(f[2], 16, 64)
		m.path = f[5]
		switch {
		case m.path == "[vdso]":
			m.obj = Object{Key: "vdso", Bias: m.lo, Kind: KindVDSO}
		case strings.HasPrefix(m.path, "/"):
			progs, ok := biases[m.path]
			if !ok {
				ef, err := elf.Open(m.path)
				if err != nil {
					continue
				}
				for _, p := range ef.Progs {
					progs = append(progs, p.ProgHeader)
				}
				ef.Close()
				biases[m.path] = progs
			}
			for _, p := range progs {
				if p.Type == elf.PT_LOAD && p.Off <= m.off && m.off < p.Off+p.Filesz {
					m.obj = Object{Key: m.path, Bias: m.lo - m.off - (p.Vaddr - p.Off), Path: m.path}
					break
				}
			}
			if m.obj.Path == "" {
				continue
			}
		default:
			continue
		}
		out = append(out, m)
	}
	return out
}

// Object implements Process over the dump's maps.
func (d *dump) Object(pc uint64) (Object, bool) {
	i := sort.Search(len(d.maps), func(i int) bool { return d.maps[i].hi > pc })
	if i < len(d.maps) && d.maps[i].lo <= pc {
		return d.maps[i].obj, true
	}
	return Object{}, false
}

// symbolizer names pcs of a dump with the ELF symbols (.symtab, else
// .dynsym) of the mapped files: enough for test binaries; libc's local
// functions show as "libc.so.6+0xOFF".
type symbolizer struct {
	d    *dump
	syms map[string][]elf.Symbol
}

func (s *symbolizer) name(pc uint64) string {
	o, ok := s.d.Object(pc)
	if !ok {
		return fmt.Sprintf("%#x", pc)
	}
	if o.Kind == KindVDSO {
		return "[vdso]"
	}
	syms, ok := s.syms[o.Path]
	if !ok {
		if f, err := elf.Open(o.Path); err == nil {
			syms, _ = f.Symbols()
			if len(syms) == 0 {
				syms, _ = f.DynamicSymbols()
			}
			f.Close()
		}
		syms = funcSyms(syms)
		s.syms[o.Path] = syms
	}
	addr := pc - o.Bias
	i := sort.Search(len(syms), func(i int) bool { return syms[i].Value > addr }) - 1
	if i >= 0 && addr < syms[i].Value+syms[i].Size {
		return gccBaseName(syms[i].Name)
	}
	base := o.Path[strings.LastIndexByte(o.Path, '/')+1:]
	return fmt.Sprintf("%s+%#x", base, addr)
}

func funcSyms(all []elf.Symbol) []elf.Symbol {
	var out []elf.Symbol
	for _, s := range all {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Value < out[j].Value })
	return out
}

// gccBaseName drops the suffix GCC gives the clones of a function
// (deep_leaf.constprop.0, f.isra.0, f.part.0, f.cold); Go names
// (main.middle) keep their dots.
func gccBaseName(name string) string {
	for _, suf := range []string{".constprop.", ".isra.", ".part.", ".cold"} {
		if i := strings.Index(name, suf); i > 0 {
			return name[:i]
		}
	}
	return name
}
