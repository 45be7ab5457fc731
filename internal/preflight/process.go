package preflight

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gprofile/gprofile/internal/symbolize/debuginfo"
	"github.com/gprofile/gprofile/internal/symbolize/elfio"
	"github.com/gprofile/gprofile/internal/symbolize/procmaps"
	"github.com/gprofile/gprofile/internal/unwind"
)

// Process checks each binary that process pid maps executable
// (<proc>/PID/maps), one Item per binary, named by its path: frame
// pointers or not, CFI (.eh_frame, .debug_frame) or not, symbols
// (.symtab, or only the exported .dynsym), and debug information (DWARF
// in the file, a separate debug file by build ID or .gnu_debuglink, or
// MiniDebugInfo). A binary that gives neither frame pointers nor CFI
// (stacks through it are cut) or only exported names is a Warn; one
// without line numbers is a Note. The error is that of reading the maps
// (no such process).
func (h Host) Process(pid int) ([]Item, error) {
	f, err := os.Open(filepath.Join(h.Proc, fmt.Sprint(pid), "maps"))
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	defer f.Close()
	maps, err := procmaps.Parse(f)
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	root := filepath.Join(h.Proc, fmt.Sprint(pid), "root")
	seen := map[string]bool{}
	var items []Item
	for _, m := range maps {
		if !m.Executable() || !strings.HasPrefix(m.Path, "/") || seen[m.Path] {
			continue
		}
		seen[m.Path] = true
		path := filepath.Join(root, m.Path)
		if m.Deleted {
			path = filepath.Join(h.Proc, fmt.Sprint(pid), "map_files", fmt.Sprintf("%x-%x", m.Start, m.Limit))
		}
		items = append(items, checkBinary(m.Path, path, filepath.Join(root, filepath.Dir(m.Path))))
	}
	return items, nil
}

// checkBinary checks the binary named name, opened at path (through the
// process's root), whose directory there is dir.
func checkBinary(name, path, dir string) Item {
	it := Item{Name: name}
	file, err := elfio.OpenRegular(path, elfio.MaxBinaryBytes)
	if err != nil {
		it.Status, it.Detail = Warn, fmt.Sprintf("cannot open (%v): its frames go unnamed", err)
		it.Fix = "run as root (CAP_SYS_PTRACE, CAP_CHECKPOINT_RESTORE)"
		return it
	}
	defer file.Close()
	ef, lr, err := elfio.OpenELF(file)
	if err != nil {
		it.Status, it.Detail = Warn, fmt.Sprintf("not a readable ELF file (%v)", err)
		return it
	}
	var dbg *elf.File
	debugWhere := ""
	switch d := debuginfo.FindLocal(ef, elfio.BuildID(ef), file, &debuginfo.Options{Dir: dir}); {
	case debuginfo.HasDWARF(ef):
		debugWhere = "DWARF in the file"
	case d != nil:
		defer d.Close()
		dbg = d.ELF
		how := ".gnu_debuglink"
		if strings.Contains(d.Path, "/.build-id/") {
			how = "build ID"
		}
		debugWhere = fmt.Sprintf("separate debug file by %s (%s)", how, d.Path)
	}
	mini := debuginfo.MiniDebugInfo(ef, lr) != nil

	var facets []string
	fp := framePointers(ef, lr)
	facets = append(facets, fp)
	cfi := hasSection(ef, ".eh_frame") || hasSection(ef, ".debug_frame") || (dbg != nil && hasSection(dbg, ".debug_frame"))
	if cfi {
		facets = append(facets, "CFI")
	} else {
		facets = append(facets, "no CFI")
	}
	names := "symbols"
	switch {
	case hasSection(ef, ".symtab") || (dbg != nil && hasSection(dbg, ".symtab")):
	case mini:
		names = "symbols from MiniDebugInfo"
	default:
		names = "only exported symbols (.dynsym)"
		it.Status = Warn
	}
	facets = append(facets, names)
	if debugWhere == "" && dbg == nil {
		debugWhere = "no debug info (no line numbers or inlined functions)"
		it.Status = max(it.Status, Note)
	}
	facets = append(facets, debugWhere)
	if !cfi && !strings.HasPrefix(fp, "frame pointers (") {
		it.Status = Warn
		facets = append(facets, "stacks through it are cut")
	}
	it.Detail = strings.Join(facets, ", ")
	if it.Status != OK {
		it.Fix = "install its debug package (Debian: the -dbgsym package, libc6-dbg for libc), or set DEBUGINFOD_URLS"
	}
	return it
}

func hasSection(f *elf.File, name string) bool {
	s := f.Section(name)
	return s != nil && s.Type != elf.SHT_NOBITS && s.Size > 0
}

// framePointers tells whether the functions of f set up a frame pointer:
// Go binaries do (amd64); for others, it reads the first bytes of up to
// 256 functions of its symbol table and looks for push %rbp; mov
// %rsp,%rbp (after an endbr64), the x86-64 prologue of code built with
// -fno-omit-frame-pointer.
func framePointers(f *elf.File, lr *elfio.ReaderAt) string {
	if unwind.IsGoELF(f) {
		return "frame pointers (Go)"
	}
	if f.Machine != elf.EM_X86_64 {
		return "frame pointers unknown (not x86-64)"
	}
	syms, err := f.Symbols()
	if err != nil || len(syms) == 0 {
		syms, _ = f.DynamicSymbols()
	}
	var funcs []elf.Symbol
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size >= 8 && s.Value != 0 {
			funcs = append(funcs, s)
		}
	}
	if len(funcs) == 0 {
		return "frame pointers unknown (no function symbols)"
	}
	step := max(1, len(funcs)/256)
	with, total := 0, 0
	for i := 0; i < len(funcs); i += step {
		code, ok := codeAt(f, lr, funcs[i].Value, 8)
		if !ok {
			continue
		}
		total++
		code, _ = strings.CutPrefix(code, "\xf3\x0f\x1e\xfa") // endbr64
		if strings.HasPrefix(code, "\x55\x48\x89\xe5") {
			with++
		}
	}
	switch {
	case total == 0:
		return "frame pointers unknown"
	case with*2 >= total:
		return fmt.Sprintf("frame pointers (%d of %d functions checked)", with, total)
	}
	return fmt.Sprintf("no frame pointers (%d of %d functions checked)", with, total)
}

// codeAt returns n bytes of f's code at virtual address addr.
func codeAt(f *elf.File, lr *elfio.ReaderAt, addr uint64, n int) (string, bool) {
	for _, s := range f.Sections {
		if s.Type != elf.SHT_PROGBITS || s.Flags&elf.SHF_EXECINSTR == 0 || addr < s.Addr || addr+uint64(n) > s.Addr+s.Size {
			continue
		}
		b := make([]byte, n)
		if _, err := lr.ReadAt(b, int64(s.Offset+addr-s.Addr)); err != nil {
			return "", false
		}
		return string(b), true
	}
	return "", false
}
