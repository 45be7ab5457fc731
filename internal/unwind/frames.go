package unwind

import (
	"errors"
	"fmt"
)

// frameSection is one CFI section as read from a file: .eh_frame (LSB
// format: CIE id 0, pc-relative pointers) or .debug_frame (DWARF: CIE id
// all ones, absolute addresses).
type frameSection struct {
	data []byte
	eh   bool
	// addr is the virtual address of data[0] (the base of pcrel
	// pointers); textAddr and dataAddr are the bases of textrel and
	// datarel pointers (.text and .got).
	addr, textAddr, dataAddr uint64
}

// cie is a parsed Common Information Entry.
type cie struct {
	codeAlign uint64
	dataAlign int64
	raReg     uint64
	fdeEnc    uint8
	addrSize  uint8
	hasZ      bool
	signal    bool
	initial   []byte
}

// fde is a parsed Frame Description Entry: the code range [start, end) and
// its CFA program.
type fde struct {
	cie        *cie
	start, end uint64
	insns      []byte
}

// Pointer encodings (LSB Core, DWARF Extensions, DW_EH_PE_*).
const (
	peAbsptr   = 0x00
	peOmit     = 0xff
	peIndirect = 0x80
)

var (
	errBadLength = errors.New("record length runs past the section")
	errNotCIE    = errors.New("FDE's CIE pointer does not point at a CIE")
)

// readPtr reads one pointer in encoding enc. Indirect pointers are
// returned as the address of the pointer (only personality routines use
// them, and the unwinder ignores those) unless wantValue is set, where
// they are an error: the file image alone cannot say what they point to.
func (s *frameSection) readPtr(r *buf, enc uint8, wantValue bool) (uint64, error) {
	if enc == peOmit {
		return 0, nil
	}
	pos := s.addr + uint64(r.off)
	var v uint64
	switch enc & 0x0f {
	case 0x00, 0x04, 0x0c:
		v = r.u64()
	case 0x01:
		v = r.uleb()
	case 0x02:
		v = uint64(r.u16())
	case 0x03:
		v = uint64(r.u32())
	case 0x09:
		v = uint64(r.sleb())
	case 0x0a:
		v = uint64(int64(int16(r.u16())))
	case 0x0b:
		v = uint64(int64(int32(r.u32())))
	default:
		return 0, fmt.Errorf("unknown pointer format %#x", enc)
	}
	switch enc & 0x70 {
	case 0x00:
	case 0x10:
		v += pos
	case 0x20:
		v += s.textAddr
	case 0x30:
		v += s.dataAddr
	default:
		return 0, fmt.Errorf("unsupported pointer application %#x", enc)
	}
	if enc&peIndirect != 0 && wantValue {
		return 0, fmt.Errorf("indirect pointer %#x", enc)
	}
	return v, r.err
}

// frameStats counts what a walk of CFI sections found and skipped.
type frameStats struct {
	cies, fdes       int
	badCIEs, badFDEs int
	err              error // the first error met
}

func (st *frameStats) note(err error) {
	if st.err == nil {
		st.err = err
	}
}

// frameWalk is one walk over the records of a section.
type frameWalk struct {
	s    *frameSection
	st   *frameStats
	cies map[uint64]*cie
	bad  map[uint64]bool
	fn   func(*fde)
	cur  fde // the FDE fn is called with, reused (fn must not keep it)
}

// parseFrames calls fn for every FDE of s in section order (fn must copy
// what it keeps of the FDE). A bad CIE or
// FDE is skipped and counted; a length that runs past the section ends
// the walk (nothing after it can be found by walking). The walk reads each
// byte once, so its time is linear in the section size whatever the
// content. It returns the walk for parseFDEsAt and the offset where it
// stopped early, or -1 when it reached the end or the terminator.
func (s *frameSection) parseFrames(st *frameStats, fn func(*fde)) (*frameWalk, int) {
	w := &frameWalk{s: s, st: st, cies: map[uint64]*cie{}, bad: map[uint64]bool{}, fn: fn}
	for off := 0; off < len(s.data); {
		next, ok := w.record(off, false)
		if !ok {
			return w, off
		}
		if next < 0 {
			return w, -1
		}
		off = next
	}
	return w, -1
}

// parseFDEsAt parses the FDEs at the given section offsets (from
// .eh_frame_hdr's table), skipping records that are not FDEs.
func (w *frameWalk) parseFDEsAt(offs []int) {
	for _, off := range offs {
		w.record(off, true)
	}
}

// record parses the record at off and returns the offset of the next one
// (-1 after the terminator); ok is false when its length is bad.
func (w *frameWalk) record(off int, fdeOnly bool) (next int, ok bool) {
	s, st := w.s, w.st
	r := &buf{b: s.data, off: off}
	length := uint64(r.u32())
	dwarf64 := false
	if length == 0xffffffff {
		length = r.u64()
		dwarf64 = true
	}
	if r.err != nil || length > uint64(r.left()) {
		st.note(errBadLength)
		return 0, false
	}
	if length == 0 {
		if s.eh {
			return -1, true // the terminator
		}
		return r.off, true
	}
	body := r.off
	rec := &buf{b: r.b[:body+int(length)], off: body}
	next = body + int(length)
	var id uint64
	if dwarf64 {
		id = rec.u64()
	} else {
		id = uint64(rec.u32())
	}
	if s.isCIE(id, dwarf64) {
		if !fdeOnly {
			st.cies++
			if _, err := s.parseCIE(rec); err != nil {
				st.badCIEs++
				st.note(fmt.Errorf("CIE at %#x: %w", off, err))
			}
		}
		return next, true
	}
	st.fdes++
	ciePos, ok := s.ciePos(id, body, dwarf64)
	if !ok {
		st.badFDEs++
		st.note(fmt.Errorf("FDE at %#x: %w", off, errNotCIE))
		return next, true
	}
	c, err := s.cieAt(ciePos, w.cies, w.bad)
	if err == nil {
		if err = s.parseFDE(rec, c, &w.cur); err == nil {
			w.fn(&w.cur)
			return next, true
		}
	}
	st.badFDEs++
	st.note(fmt.Errorf("FDE at %#x: %w", off, err))
	return next, true
}

func (s *frameSection) isCIE(id uint64, dwarf64 bool) bool {
	if s.eh {
		return id == 0
	}
	if dwarf64 {
		return id == ^uint64(0)
	}
	return id == 0xffffffff
}

// ciePos turns an FDE's CIE pointer into a section offset.
func (s *frameSection) ciePos(id uint64, body int, dwarf64 bool) (uint64, bool) {
	if !s.eh {
		return id, id < uint64(len(s.data))
	}
	if id > uint64(body) {
		return 0, false
	}
	return uint64(body) - id, true
}

// cieAt parses (once) the CIE whose record starts at pos.
func (s *frameSection) cieAt(pos uint64, cies map[uint64]*cie, bad map[uint64]bool) (*cie, error) {
	if c := cies[pos]; c != nil {
		return c, nil
	}
	if bad[pos] {
		return nil, errors.New("bad CIE")
	}
	c, err := s.cieRecord(pos)
	if err != nil {
		bad[pos] = true
		return nil, err
	}
	cies[pos] = c
	return c, nil
}

func (s *frameSection) cieRecord(pos uint64) (*cie, error) {
	r := &buf{b: s.data, off: int(pos)}
	length := uint64(r.u32())
	dwarf64 := length == 0xffffffff
	if dwarf64 {
		length = r.u64()
	}
	if r.err != nil || length == 0 || length > uint64(r.left()) {
		return nil, errBadLength
	}
	rec := &buf{b: r.b[:r.off+int(length)], off: r.off}
	var id uint64
	if dwarf64 {
		id = rec.u64()
	} else {
		id = uint64(rec.u32())
	}
	if !s.isCIE(id, dwarf64) {
		return nil, errNotCIE
	}
	return s.parseCIE(rec)
}

// parseCIE parses a CIE body after its id.
func (s *frameSection) parseCIE(r *buf) (*cie, error) {
	c := &cie{addrSize: 8, fdeEnc: peAbsptr}
	version := r.u8()
	if version != 1 && version != 3 && version != 4 {
		return nil, fmt.Errorf("CIE version %d", version)
	}
	aug := r.cstring()
	if version == 4 {
		c.addrSize = r.u8()
		if seg := r.u8(); seg != 0 || (c.addrSize != 4 && c.addrSize != 8) {
			return nil, fmt.Errorf("address size %d, segment size %d", c.addrSize, seg)
		}
	}
	c.codeAlign = r.uleb()
	c.dataAlign = r.sleb()
	if version == 1 {
		c.raReg = uint64(r.u8())
	} else {
		c.raReg = r.uleb()
	}
	if err := s.parseAug(r, c, aug); err != nil {
		return nil, err
	}
	if r.err != nil {
		return nil, r.err
	}
	if c.codeAlign == 0 || c.codeAlign > 1<<16 {
		return nil, fmt.Errorf("code alignment %d", c.codeAlign)
	}
	c.initial = r.b[r.off:]
	return c, nil
}

// parseAug reads the augmentation data of a CIE: z (data length), R (FDE
// pointer encoding), P (personality), L (LSDA encoding), S (signal frame).
// Any other augmentation makes the CIE unusable.
func (s *frameSection) parseAug(r *buf, c *cie, aug string) error {
	if aug == "" {
		return nil
	}
	if aug[0] != 'z' {
		return fmt.Errorf("unknown augmentation %q", aug)
	}
	c.hasZ = true
	n := r.uleb()
	data := &buf{b: r.bytes(n)}
	if r.err != nil {
		return r.err
	}
	// Pointers in the augmentation data are relative to their place in the section.
	data.off = 0
	base := r.off - int(n)
	for _, ch := range aug[1:] {
		switch ch {
		case 'R':
			c.fdeEnc = data.u8()
		case 'L':
			data.u8()
		case 'P':
			enc := data.u8()
			sub := *s
			sub.addr += uint64(base)
			if _, err := sub.readPtr(data, enc, false); err != nil {
				return fmt.Errorf("personality: %w", err)
			}
		case 'S':
			c.signal = true
		default:
			return fmt.Errorf("unknown augmentation %q", aug)
		}
	}
	return data.err
}

// parseFDE parses an FDE body after its CIE pointer.
func (s *frameSection) parseFDE(r *buf, c *cie, f *fde) error {
	*f = fde{cie: c}
	var size uint64
	if s.eh {
		start, err := s.readPtr(r, c.fdeEnc, true)
		if err != nil {
			return err
		}
		if size, err = s.readPtr(r, c.fdeEnc&0x0f, true); err != nil {
			return err
		}
		f.start = start
	} else if c.addrSize == 4 {
		f.start, size = uint64(r.u32()), uint64(r.u32())
	} else {
		f.start, size = r.u64(), r.u64()
	}
	if c.hasZ {
		r.bytes(r.uleb())
	}
	if r.err != nil {
		return r.err
	}
	f.end = f.start + size
	if f.end < f.start {
		return fmt.Errorf("range %#x+%#x wraps", f.start, size)
	}
	f.insns = r.b[r.off:]
	return nil
}
