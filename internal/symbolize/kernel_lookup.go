package symbolize

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gprofile/gprofile/internal/symbolize/kallsyms"
)

// KernelLookup names kernel addresses on demand, so that a profile pays
// for the addresses its stacks hold rather than for a listing of all of
// kallsyms (cmd/gprofile passes attach.OpenKernelSymbolLookup, a BPF
// program that asks the kernel's own kallsyms_lookup).
type KernelLookup interface {
	// Lookup sets texts[i] (len(texts) == len(addrs)) to the kernel's
	// printk "%pS" text for addrs[i]: "name+0xoff/0xsize", with
	// " [module]" after a module's symbol, or "0x<hex>" when no symbol
	// covers the address; "" when it could not be named. An error means
	// the texts from the failed one on are "".
	Lookup(addrs []uint64, texts []string) error
	// TextRange returns the kernel image's text, [_stext, _etext).
	TextRange() (start, end uint64)
	// Close releases it.
	Close() error
}

// openLookup opens the KernelLookup, sets the mappings from its text
// range and from procRoot/modules, and readies the memo for this range.
// It reports whether names will come from it; when not,
// lookupErr says why.
func (k *kernelSymbolizer) openLookup(open func() (KernelLookup, error), procRoot string) bool {
	l, err := open()
	if err != nil {
		k.lookupErr = err
		return false
	}
	k.lookup = l
	start, end := l.TextRange()
	if end > start {
		k.image.Start, k.image.Limit = start, end
	}
	for _, m := range readModules(filepath.Join(procRoot, "modules")) {
		k.modules = append(k.modules, moduleMapping{m.Name, &Mapping{
			Start: m.Start, Limit: m.End, Path: "[" + m.Name + "]", Kernel: true,
		}})
	}
	if end <= start {
		k.memo = nil // no range to bound the image's addresses by
		return true
	}
	k.memo.use(start, end)
	return true
}

// readModules returns the modules of a file in /proc/modules format with
// their extents; nil when it cannot be read (optional: module frames then
// carry the kernel image's mapping). Lines with a zero address
// (kptr_restrict) or malformed ones are skipped.
func readModules(path string) []kallsyms.Module {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var mods []kallsyms.Module
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if name, r, ok := kallsyms.ParseModuleLine(sc.Text()); ok {
			mods = append(mods, kallsyms.Module{Name: name, Start: r.Start, End: r.End})
		}
	}
	return mods
}

// prefetch names, in one KernelLookup call, the addresses of a kernel
// callchain (leaf first, as Stack takes it) that are not cached yet, so
// that resolve finds them all cached. Without a KernelLookup it does
// nothing.
func (k *kernelSymbolizer) prefetch(ips []uint64) {
	k.wait()
	if k.lookup == nil {
		return
	}
	k.missing = k.missing[:0]
	for i, ip := range ips {
		addr := lookupAddr(i, ip)
		if _, ok := k.cache[addr]; !ok {
			if text, ok := k.memo.text(addr); ok {
				k.cache[addr] = k.fromText(addr, text)
				continue
			}
			k.missing = append(k.missing, addr)
			k.cache[addr] = frameInfo{} // placeholder: dedups within ips
		}
	}
	k.name(k.missing)
}

// name names addrs (lookup addresses) in one KernelLookup call and
// caches them; a failed call leaves them unnamed (no symbol).
func (k *kernelSymbolizer) name(addrs []uint64) {
	if len(addrs) == 0 {
		return
	}
	k.texts = append(k.texts[:0], make([]string, len(addrs))...)
	_ = k.lookup.Lookup(addrs, k.texts) // failed texts are "": no symbol
	for i, addr := range addrs {
		k.cache[addr] = k.fromText(addr, k.texts[i])
		k.memo.add(addr, k.texts[i])
	}
}

// fromText makes the frameInfo of addr from its "%pS" text.
func (k *kernelSymbolizer) fromText(addr uint64, text string) frameInfo {
	name, off, module, ok := parseSymbolText(text)
	if !ok || off > addr {
		if m := k.mappingOf("", addr); m != nil {
			return frameInfo{mapping: m, reason: ReasonNoSymbol}
		}
		return frameInfo{reason: ReasonNoMapping}
	}
	m := k.mappingOf(module, addr)
	if m == nil {
		m = k.image // a symbol outside _stext.._etext, such as init text or a BPF program
	}
	return frameInfo{function: name, systemName: name, start: addr - off, mapping: m}
}

// parseSymbolText parses printk's "%pS" text for an address:
// "name+0xoff/0xsize" with an optional " [module]" (which a build ID may
// follow inside the brackets, "[module buildid]"). ok is false for the
// "0x<hex>" of an address no symbol covers, and for anything malformed.
func parseSymbolText(text string) (name string, off uint64, module string, ok bool) {
	rest := text
	if i := strings.LastIndex(rest, " ["); i >= 0 && strings.HasSuffix(rest, "]") {
		module, _, _ = strings.Cut(rest[i+2:len(rest)-1], " ")
		rest = rest[:i]
	}
	i := strings.LastIndex(rest, "+0x")
	if i <= 0 {
		return "", 0, "", false
	}
	offHex, sizeHex, found := strings.Cut(rest[i+3:], "/0x")
	if !found {
		return "", 0, "", false
	}
	off, err1 := strconv.ParseUint(offHex, 16, 64)
	_, err2 := strconv.ParseUint(sizeHex, 16, 64)
	if err1 != nil || err2 != nil {
		return "", 0, "", false
	}
	name = rest[:i]
	if strings.ContainsAny(name, " \t\n") {
		return "", 0, "", false
	}
	return name, off, module, true
}

// closeLookup saves the kernel name memo and releases the
// KernelLookup, if any, once the background open or load has ended.
// Addresses not cached by then stay unnamed.
func (k *kernelSymbolizer) closeLookup() error {
	k.wait()
	k.memo.save()
	if k.lookup == nil {
		return nil
	}
	err := k.lookup.Close()
	k.lookup = nil
	if err != nil {
		return fmt.Errorf("close kernel symbol lookup: %w", err)
	}
	return nil
}
