package symbolize

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/gprofile/gprofile/internal/symbolize/kallsyms"
	"github.com/gprofile/gprofile/internal/symbolize/srcline"
)

// kernelPath is the Mapping.Path of the kernel image, as perf and pprof
// name it.
const kernelPath = "[kernel.kallsyms]"

// frameInfo is what one address resolves to: every Frame field that does
// not depend on which sample it came from. The address caches hold it.
type frameInfo struct {
	function, systemName string
	start                uint64
	mapping              *Mapping
	reason               Reason
	lines                []srcline.Line // Binary.Lines: inlined first, physical last
	startLine            int            // line of the function's first instruction
}

// kernelSymbolizer names kernel addresses, on demand through a
// KernelLookup or else from a listing of kallsyms, and caches them.
type kernelSymbolizer struct {
	ready     chan struct{}   // closed when the fields below are set
	loaded    bool            // ready was seen closed
	lookup    KernelLookup    // when not nil, names come from it (ksyms is nil)
	ksyms     *kallsyms.Table // nil when kallsyms could not be read
	note      string
	lookupErr error // why the KernelLookup was not used, when it was tried
	iterErr   error // why the BPF iterator was not used, when it was tried
	image     *Mapping
	modules   []moduleMapping
	cache     map[uint64]frameInfo
	memo      *kernelMemo // the KernelLookup's texts of earlier runs; nil without a cache
	missing   []uint64    // prefetch's scratch: addresses not cached yet
	texts     []string    // name's scratch: their texts
}

// moduleMapping is the shared Mapping of one module.
type moduleMapping struct {
	name string
	m    *Mapping
}

// newKernelSymbolizer starts, in the background, opening the
// KernelLookup that lookup opens when lookup is not nil (the module
// extents then come from procRoot/modules), and when that fails
// or lookup is nil, loading kallsyms (and, to bound module symbols,
// procRoot/modules): from the BPF iterator that iter opens when iter is
// not nil, else or when that fails from kallsymsPath
// (bench/symbolize/RESULTS.md compares them). Either listing is parsed chunk by
// chunk as it is read, so the load ends soon after the read, which then
// overlaps with the caller's own start-up (loading BPF, opening perf
// events). Failures leave it working with a note: kernel frames then
// stay unnamed. With a cacheDir, the KernelLookup's texts for the
// image's addresses are kept there for later runs of this boot
// (kernelMemo), and the ones earlier runs kept are named without it.
func newKernelSymbolizer(lookup func() (KernelLookup, error), iter func() (*kallsyms.Table, error), kallsymsPath, procRoot, cacheDir string) *kernelSymbolizer {
	k := &kernelSymbolizer{
		ready: make(chan struct{}),
		image: &Mapping{Path: kernelPath, Kernel: true, Limit: math.MaxUint64},
		cache: make(map[uint64]frameInfo),
	}
	go func() {
		defer close(k.ready)
		if lookup != nil {
			k.memo = openKernelMemo(cacheDir, procRoot)
			if k.openLookup(lookup, procRoot) {
				return
			}
		}
		k.memo = nil
		k.load(iter, kallsymsPath, procRoot)
	}()
	return k
}

// wait blocks until kallsyms is loaded.
func (k *kernelSymbolizer) wait() {
	if !k.loaded {
		<-k.ready
		k.loaded = true
	}
}

// load reads kallsyms and the module extents into k.
func (k *kernelSymbolizer) load(iter func() (*kallsyms.Table, error), kallsymsPath, procRoot string) {
	var ks *kallsyms.Table
	var err error
	if iter != nil {
		if ks, err = iter(); err != nil {
			k.iterErr = err
		}
	}
	if ks == nil {
		ks, err = kallsyms.Load(kallsymsPath)
	}
	switch {
	case err != nil && k.iterErr != nil:
		k.note = fmt.Sprintf("kernel frames are not named: %v (and the BPF kallsyms iterator: %v)", err, k.iterErr)
		return
	case err != nil && k.lookupErr != nil:
		k.note = fmt.Sprintf("kernel frames are not named: %v (and the BPF kernel symbol lookup: %v)", err, k.lookupErr)
		return
	case err != nil:
		k.note = fmt.Sprintf("kernel frames are not named: %v", err)
		return
	case ks.Hidden():
		k.ksyms = ks
		k.note = hiddenNote(kallsymsPath, procRoot)
		return
	}
	k.ksyms = ks
	_ = ks.LoadModules(filepath.Join(procRoot, "modules")) // optional bound
	if start, end, ok := ks.TextRange(); ok {
		k.image.Start, k.image.Limit = start, end
	}
	for _, m := range ks.Modules() {
		k.modules = append(k.modules, moduleMapping{m.Name, &Mapping{
			Start: m.Start, Limit: m.End, Path: "[" + m.Name + "]", Kernel: true,
		}})
	}
}

// hiddenNote explains zero addresses in kallsyms from the sysctls that
// cause them, read from <procRoot>/sys/kernel (kernel.kptr_restrict, and
// kernel.perf_event_paranoid which kptr_restrict=0 defers to).
func hiddenNote(kallsymsPath, procRoot string) string {
	sysctl := func(name string) string {
		b, err := os.ReadFile(filepath.Join(procRoot, "sys/kernel", name))
		if err != nil {
			return "?"
		}
		return strings.TrimSpace(string(b))
	}
	var why string
	switch restrict := sysctl("kptr_restrict"); restrict {
	case "2":
		why = "kernel.kptr_restrict=2 hides them even from root; set sysctl kernel.kptr_restrict=1 and run as root"
	case "0":
		why = "kernel.kptr_restrict=0 with kernel.perf_event_paranoid=" + sysctl("perf_event_paranoid") +
			" hides them from users without CAP_SYSLOG; run as root, or set sysctl kernel.perf_event_paranoid=1"
	default:
		why = "kernel.kptr_restrict=" + restrict + " hides them from users without CAP_SYSLOG; run as root"
	}
	return fmt.Sprintf("kernel frames are not named: %s lists every address as 0 (%s)", kallsymsPath, why)
}

// resolve names the kernel address addr (already moved back by one for
// return addresses), through the cache.
func (k *kernelSymbolizer) resolve(addr uint64) frameInfo {
	k.wait()
	if fi, ok := k.cache[addr]; ok {
		return fi
	}
	if text, ok := k.memo.text(addr); ok {
		fi := k.fromText(addr, text)
		k.cache[addr] = fi
		return fi
	}
	if k.lookup != nil { // Stack's prefetch has named it, unless called alone
		k.name([]uint64{addr})
		return k.cache[addr]
	}
	fi := k.fromKallsyms(addr)
	k.cache[addr] = fi
	return fi
}

// fromKallsyms names addr from the kallsyms listing.
func (k *kernelSymbolizer) fromKallsyms(addr uint64) frameInfo {
	switch {
	case k.ksyms == nil:
		return frameInfo{mapping: k.image, reason: ReasonNoSymbol}
	case k.ksyms.Hidden():
		return frameInfo{mapping: k.image, reason: ReasonKernelHidden}
	}
	if sym, ok := k.ksyms.Lookup(addr); ok {
		m := k.mappingOf(sym.Module, addr)
		if m == nil {
			m = k.image // a symbol outside _stext.._etext, such as init text
		}
		return frameInfo{function: sym.Name, systemName: sym.Name, start: sym.Start, mapping: m}
	}
	if m := k.mappingOf("", addr); m != nil {
		return frameInfo{mapping: m, reason: ReasonNoSymbol}
	}
	return frameInfo{reason: ReasonNoMapping}
}

// mappingOf returns the Mapping of the named module, or else of the
// image or module whose range holds addr, or nil.
func (k *kernelSymbolizer) mappingOf(module string, addr uint64) *Mapping {
	for _, mm := range k.modules {
		if module != "" && mm.name == module {
			return mm.m
		}
	}
	if k.image.Start <= addr && addr < k.image.Limit {
		return k.image
	}
	for _, mm := range k.modules {
		if mm.m.Start <= addr && addr < mm.m.Limit {
			return mm.m
		}
	}
	return nil
}
