package unwind

import (
	"debug/elf"
	"encoding/binary"
	"slices"
	"sync"
	"testing"

	"github.com/gprofile/gprofile/internal/testutil"
)

// libcEHFrame returns up to max bytes of the start of libc's .eh_frame
// (seed corpus), or nil.
func libcEHFrame(max int) []byte {
	f, err := elf.Open("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		return nil
	}
	defer f.Close()
	s := f.Section(".eh_frame")
	if s == nil {
		return nil
	}
	b, err := s.Data()
	if err != nil {
		return nil
	}
	return b[:min(max, len(b))]
}

// buildFrom builds a table from raw CFI bytes as .eh_frame (at address
// 0x1000) or .debug_frame.
func buildFrom(data []byte, eh bool) (*Table, error) {
	b := newTableBuilder()
	s := &frameSection{data: data, eh: eh}
	if eh {
		s.addr = 0x1000
	}
	b.addSection(s, 0, nil)
	return b.finish()
}

// FuzzParseCFI feeds arbitrary bytes to the CFI parser as .eh_frame and as
// .debug_frame: it must never panic, hang or build rows out of order.
func FuzzParseCFI(f *testing.F) {
	f.Add(hostileCIE("zR", []byte{0x1b}))
	f.Add(hostileCIE("zXY", nil))
	if b := libcEHFrame(4096); b != nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, eh := range []bool{true, false} {
			tab, err := buildFrom(data, eh)
			if err != nil {
				continue
			}
			for i := 1; i < len(tab.pcs); i++ {
				if tab.pcs[i] <= tab.pcs[i-1] {
					t.Fatalf("rows out of order at %d: %#x after %#x", i, tab.pcs[i], tab.pcs[i-1])
				}
			}
			for _, off := range tab.pcs {
				tab.lookup(tab.base + uint64(off))
			}
		}
	})
}

// fuzzProcess maps every pc below 4 GiB to one object whose table is given.
type fuzzProcess struct{}

func (fuzzProcess) Object(pc uint64) (Object, bool) {
	return Object{Key: "fuzz"}, pc < 1<<32
}

// FuzzUnwind unwinds an arbitrary stack window with a table built from
// arbitrary CFI bytes: it must end (with any Stop) without panicking.
func FuzzUnwind(f *testing.F) {
	stack := make([]byte, 256)
	binary.LittleEndian.PutUint64(stack[8:], 0x2000)
	f.Add(libcEHFrame(2048), stack)
	f.Add(hostileCIE("zR", []byte{0x1b}), stack)
	f.Fuzz(func(t *testing.T, cfi, stack []byte) {
		tab, err := buildFrom(cfi, true)
		if err != nil {
			return
		}
		u := New(Options{MaxFrames: 512})
		u.cache.get("fuzz", func() *Table { return tab })
		var regs Regs
		for i := range regs {
			if len(stack) >= 8*(i+1) {
				regs[i] = binary.LittleEndian.Uint64(stack[8*i:])
			}
		}
		regs[RegRSP] = 0x7fff0000
		if tab.Rows() > 0 {
			regs[RegRIP] = tab.base + uint64(tab.pcs[len(stack)%len(tab.pcs)])
		}
		pcs, stop := u.Unwind(nil, fuzzProcess{}, &regs, stack)
		if len(pcs) == 0 || len(pcs) > 512 || stop == stopNone || stop >= NumStops {
			t.Fatalf("%d frames, stop %v", len(pcs), stop)
		}
	})
}

var libcTable = sync.OnceValue(func() *Table {
	f, err := elf.Open("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		return nil
	}
	defer f.Close()
	t, _ := NewTable(f)
	return t
})

// libcProcess maps every pc of libc's CFI range (bias 0) to libc.
type libcProcess struct{ t *Table }

func (p libcProcess) Object(pc uint64) (Object, bool) {
	return Object{Key: "libc"}, pc >= p.t.base && pc-p.t.base <= uint64(p.t.pcs[len(p.t.pcs)-1])
}

// FuzzUnwindLibc unwinds arbitrary stack bytes with libc's real rules
// (its signal trampoline, PLT expressions, rbp-based and rsp-based rows),
// starting at a row chosen by the input: it must end without panicking.
func FuzzUnwindLibc(f *testing.F) {
	stack := make([]byte, 512)
	for i := 8; i+8 <= len(stack); i += 16 {
		binary.LittleEndian.PutUint64(stack[i:], 0x27000+uint64(i))
	}
	f.Add(uint32(0), stack)
	f.Add(uint32(1234), stack)
	f.Fuzz(func(t *testing.T, row uint32, stack []byte) {
		tab := libcTable()
		if tab == nil || tab.Rows() == 0 {
			testutil.Skipf(t, "no libc with .eh_frame rows at /lib/x86_64-linux-gnu/libc.so.6")
		}
		u := New(Options{MaxFrames: 256})
		u.cache.get("libc", func() *Table { return tab })
		regs := Regs{RegRSP: 0x7ffe0000, RegRBP: 0x7ffe0040}
		regs[RegRIP] = tab.base + uint64(tab.pcs[int(row)%len(tab.pcs)])
		pcs, stop := u.Unwind(nil, libcProcess{tab}, &regs, stack)
		if len(pcs) == 0 || len(pcs) > 256 || stop == stopNone || stop >= NumStops {
			t.Fatalf("%d frames, stop %v", len(pcs), stop)
		}
	})
}

// FuzzLazyFDEs builds FDEs on demand from arbitrary CFI bytes at
// arbitrary .eh_frame_hdr entries (offsets anywhere in the section, the
// middle of a record included): lookups must never panic or hang, and a
// pc gets a rule only from rows whose range holds it.
func FuzzLazyFDEs(f *testing.F) {
	f.Add(libcEHFrame(4096), []byte{0, 0, 0, 0, 0x18, 0, 0, 0, 0x40, 0, 0, 0, 0x30, 0, 0, 0}, uint64(0x1010))
	f.Add(hostileCIE("zR", []byte{0x1b}), []byte{0, 0, 0, 0, 0, 0, 0, 0}, uint64(0x1000))
	f.Fuzz(func(t *testing.T, cfi, index []byte, pc uint64) {
		if len(cfi) == 0 {
			return
		}
		var starts []uint64
		var offs []int
		for i := 0; i+8 <= len(index) && len(starts) < 64; i += 8 {
			starts = append(starts, 0x1000+uint64(binary.LittleEndian.Uint16(index[i:])))
			offs = append(offs, int(binary.LittleEndian.Uint32(index[i+4:])%uint32(len(cfi))))
		}
		slices.Sort(starts)
		l := newLazyFDEs(&frameSection{data: cfi, eh: true, addr: 0x1000}, starts, offs)
		if l == nil {
			return
		}
		tab := &Table{fdes: l}
		for _, p := range append([]uint64{pc}, starts...) {
			_, sub, ok := tab.lookup(p)
			if ok && (len(sub.pcs) == 0 || p < sub.base || p-sub.base >= uint64(sub.pcs[len(sub.pcs)-1])) {
				t.Fatalf("rule at %#x from rows [%#x, +%d)", p, sub.base, len(sub.pcs))
			}
		}
	})
}
