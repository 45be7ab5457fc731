package symbolize

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gprofile/gprofile/internal/symbolize/dwarfline"
	"github.com/gprofile/gprofile/internal/symbolize/internal/textscan"
)

// The kernel name memo keeps, across runs of one boot, the "%pS" texts a
// KernelLookup gave for addresses of the kernel image's text
// ([_stext, _etext)), so that a later run names them without a lookup
// (BenchmarkKernelMemo). It lives in the section cache
// (Options.CacheDir) under the entry kernelMemoName of the id
// "kernel-<boot_id>" (/proc/sys/kernel/random/boot_id): the image's
// addresses change only with a boot (KASLR). Module and BPF addresses,
// which a module's reload or a program's load may reuse, are never kept.
const (
	kernelMemoName  = "kernel-names"
	kernelMemoMagic = "gprofile kernel names 1\n"
	// maxKernelMemoEntries bounds the memo, which every run reads whole
	// (BenchmarkKernelMemo): many times the kernel addresses of a busy
	// run, few enough that reading them costs less than looking up a
	// run's new ones. A full memo keeps what it has.
	maxKernelMemoEntries = 1 << 14
	// maxKernelMemoBytes bounds the entry Get reads (bytes).
	maxKernelMemoBytes = 4 << 20
)

var errBadKernelMemo = errors.New("bad kernel name memo")

// kernelMemo is the kernel name memo of this boot: the texts read from
// the cache at start-up, and those this run added.
type kernelMemo struct {
	cache      *dwarfline.SectionCache
	id         string            // "kernel-" + boot_id
	start, end uint64            // the image's text range the texts were named in
	texts      map[uint64]string // lookup address → "%pS" text
	added      int               // texts added since read or saved
}

// openKernelMemo returns the memo of the boot that procRoot's
// sys/kernel/random/boot_id names, read from the section cache in
// cacheDir (empty on a miss or a bad entry); nil when cacheDir is "" or
// the boot ID cannot be read.
func openKernelMemo(cacheDir, procRoot string) *kernelMemo {
	if cacheDir == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(procRoot, "sys/kernel/random/boot_id"))
	if err != nil {
		return nil
	}
	boot := strings.TrimSpace(string(b))
	if len(boot) < 8 || len(boot) > 64 || strings.Trim(boot, "0123456789abcdef-") != "" {
		return nil
	}
	m := &kernelMemo{cache: dwarfline.NewSectionCache(cacheDir, dwarfline.DefaultSectionCacheBytes), id: "kernel-" + boot}
	if data := m.cache.Get(m.id, kernelMemoName, maxKernelMemoBytes); data != nil {
		if start, end, texts, err := decodeKernelMemo(data); err == nil {
			m.start, m.end, m.texts = start, end, texts
		}
	}
	return m
}

// use readies the memo to name addresses of the image's text range
// [start, end): texts named in another range are dropped, and later ones
// kept for this range.
func (m *kernelMemo) use(start, end uint64) {
	if m != nil && (m.start != start || m.end != end) {
		m.start, m.end, m.texts, m.added = start, end, nil, 0
	}
}

// text returns the kept text of lookup address addr; false when there
// is none (or no memo).
func (m *kernelMemo) text(addr uint64) (string, bool) {
	if m == nil {
		return "", false
	}
	t, ok := m.texts[addr]
	return t, ok
}

// add keeps the text of lookup address addr when addr is in the image's
// text range and the text names a symbol (not "0x<hex>").
func (m *kernelMemo) add(addr uint64, text string) {
	if m == nil || addr < m.start || addr >= m.end || len(m.texts) >= maxKernelMemoEntries {
		return
	}
	if _, _, _, ok := parseSymbolText(text); !ok {
		return
	}
	if m.texts == nil {
		m.texts = make(map[uint64]string)
	}
	if _, ok := m.texts[addr]; !ok {
		m.texts[addr] = text
		m.added++
	}
}

// save writes the memo to the cache when this run added to it.
func (m *kernelMemo) save() {
	if m == nil || m.added == 0 {
		return
	}
	m.cache.Update(m.id, kernelMemoName, encodeKernelMemo(m.start, m.end, m.texts))
	m.added = 0
}

// encodeKernelMemo encodes a memo: kernelMemoMagic, then uvarints: the
// text range's start and end, the number of texts, and for each, in the
// order of their addresses, the address's delta from the previous one
// (from start for the first), the text's length and its bytes. The
// section cache adds a CRC-32C.
func encodeKernelMemo(start, end uint64, texts map[uint64]string) []byte {
	addrs := make([]uint64, 0, len(texts))
	for a := range texts {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	b := append([]byte(nil), kernelMemoMagic...)
	b = binary.AppendUvarint(b, start)
	b = binary.AppendUvarint(b, end)
	b = binary.AppendUvarint(b, uint64(len(addrs)))
	prev := start
	for _, a := range addrs {
		b = binary.AppendUvarint(b, a-prev)
		b = binary.AppendUvarint(b, uint64(len(texts[a])))
		b = append(b, texts[a]...)
		prev = a
	}
	return b
}

// decodeKernelMemo decodes what encodeKernelMemo wrote; errBadKernelMemo
// for anything else: a wrong magic, a truncated or overlong field,
// addresses out of order or outside the range, more than
// maxKernelMemoEntries texts, bytes after the last.
func decodeKernelMemo(data []byte) (start, end uint64, texts map[uint64]string, err error) {
	if !strings.HasPrefix(string(data), kernelMemoMagic) {
		return 0, 0, nil, errBadKernelMemo
	}
	r := textscan.Uvarints{Rest: data[len(kernelMemoMagic):]}
	start, end = r.Next(), r.Next()
	count := r.Next()
	// each text takes three bytes at least: its delta, length and a byte
	if r.Bad || start >= end || count > maxKernelMemoEntries || count > uint64(len(r.Rest))/3 {
		return 0, 0, nil, errBadKernelMemo
	}
	texts = make(map[uint64]string, count)
	addr := start
	for i := uint64(0); i < count; i++ {
		delta := r.Next()
		text := r.Bytes(r.Next())
		if r.Bad || (i > 0 && delta == 0) || delta >= end-addr || len(text) == 0 {
			return 0, 0, nil, errBadKernelMemo
		}
		addr += delta
		texts[addr] = string(text)
	}
	if len(r.Rest) != 0 {
		return 0, 0, nil, errBadKernelMemo
	}
	return start, end, texts, nil
}
