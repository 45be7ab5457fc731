package dwarfline

import "encoding/binary"

// DWARF attribute forms (DWARF 5 section 7.5.6, and the GNU extensions
// of the dwz tool and split DWARF) that the reader decodes or skips.
const (
	formAddr          = 0x01
	formBlock2        = 0x03
	formBlock4        = 0x04
	formData2         = 0x05
	formData4         = 0x06
	formData8         = 0x07
	formString        = 0x08
	formBlock         = 0x09
	formBlock1        = 0x0a
	formData1         = 0x0b
	formFlag          = 0x0c
	formSdata         = 0x0d
	formStrp          = 0x0e
	formUdata         = 0x0f
	formRefAddr       = 0x10
	formRef1          = 0x11
	formRef2          = 0x12
	formRef4          = 0x13
	formRef8          = 0x14
	formRefUdata      = 0x15
	formIndirect      = 0x16
	formSecOffset     = 0x17
	formExprloc       = 0x18
	formFlagPresent   = 0x19
	formStrx          = 0x1a
	formAddrx         = 0x1b
	formRefSup4       = 0x1c
	formStrpSup       = 0x1d
	formData16        = 0x1e
	formLineStrp      = 0x1f
	formRefSig8       = 0x20
	formImplicitConst = 0x21
	formLoclistx      = 0x22
	formRnglistx      = 0x23
	formRefSup8       = 0x24
	formStrx1         = 0x25
	formStrx2         = 0x26
	formStrx3         = 0x27
	formStrx4         = 0x28
	formAddrx1        = 0x29
	formAddrx2        = 0x2a
	formAddrx3        = 0x2b
	formAddrx4        = 0x2c
	formGNUAddrIndex  = 0x1f01
	formGNUStrIndex   = 0x1f02
	formGNURefAlt     = 0x1f20
	formGNUStrpAlt    = 0x1f21
)

// dbuf is a cursor over a DWARF section. A read past the end (or past
// a bad LEB128) sets bad, moves the cursor to the end and returns zero,
// so that every loop over a dbuf ends within the section's length.
type dbuf struct {
	data []byte
	off  int
	big  bool // big-endian
	bad  bool
	src  *spanSource // nil: data is all there is
}

// spanSource lets a dbuf over a section read on demand make more of it
// valid as it reads on: [off, len(data)) is valid, and a read past
// len(data) makes the next span valid (grow), up to limit.
type spanSource struct {
	z     *lazySection
	full  []byte // the whole section
	limit int    // where the dbuf ends (a unit's end)
}

// growStep is how far past what a read needs grow makes valid (bytes).
const growStep = 1 << 10

// grow makes need bytes from b.off valid when b reads a section on demand
// (b.src), and reports whether they are. What lies between the span valid
// before and b.off is not read: a DIE reader that jumps over a subtree
// (DW_AT_sibling, seek) does not read it.
func (b *dbuf) grow(need uint64) bool {
	s := b.src
	if s == nil || b.bad || need > uint64(s.limit-b.off) {
		return false
	}
	end := min(s.limit, b.off+int(need)+growStep)
	e := validSpan(s.z, s.full, uint64(b.off), uint64(end))
	if e > len(b.data) {
		b.data = s.full[:e]
	}
	return uint64(len(b.data)-b.off) >= need
}

// seek moves b forward to off, which is at most len(b.data), or at most
// its source's limit when b reads a section on demand.
func (b *dbuf) seek(off int) {
	if off > len(b.data) {
		if b.src == nil || off > b.src.limit {
			b.fail()
			return
		}
		b.data = b.src.full[:off] // grow makes what follows off valid
	}
	b.off = off
}

// fail marks b bad and moves it to its end.
func (b *dbuf) fail() {
	b.bad = true
	b.off = len(b.data)
}

// left returns how many bytes are left to read.
func (b *dbuf) left() int { return len(b.data) - b.off }

// bytes returns the next n bytes (nil past the end).
func (b *dbuf) bytes(n uint64) []byte {
	if n > uint64(len(b.data)-b.off) && !b.grow(n) {
		b.fail()
		return nil
	}
	p := b.data[b.off : b.off+int(n)]
	b.off += int(n)
	return p
}

// skip moves past n bytes.
func (b *dbuf) skip(n uint64) {
	if n > uint64(len(b.data)-b.off) && !b.grow(n) {
		b.fail()
		return
	}
	b.off += int(n)
}

func (b *dbuf) u8() uint8 {
	if b.off >= len(b.data) && !b.grow(1) {
		b.fail()
		return 0
	}
	v := b.data[b.off]
	b.off++
	return v
}

func (b *dbuf) u16() uint16 {
	p := b.bytes(2)
	if p == nil {
		return 0
	}
	if b.big {
		return binary.BigEndian.Uint16(p)
	}
	return binary.LittleEndian.Uint16(p)
}

func (b *dbuf) u24() uint32 {
	p := b.bytes(3)
	if p == nil {
		return 0
	}
	if b.big {
		return uint32(p[0])<<16 | uint32(p[1])<<8 | uint32(p[2])
	}
	return uint32(p[2])<<16 | uint32(p[1])<<8 | uint32(p[0])
}

func (b *dbuf) u32() uint32 {
	p := b.bytes(4)
	if p == nil {
		return 0
	}
	if b.big {
		return binary.BigEndian.Uint32(p)
	}
	return binary.LittleEndian.Uint32(p)
}

func (b *dbuf) u64() uint64 {
	p := b.bytes(8)
	if p == nil {
		return 0
	}
	if b.big {
		return binary.BigEndian.Uint64(p)
	}
	return binary.LittleEndian.Uint64(p)
}

// uleb reads an unsigned LEB128; bits past the 64th are dropped.
func (b *dbuf) uleb() uint64 {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		if b.off >= len(b.data) && !b.grow(1) {
			b.fail()
			return 0
		}
		c := b.data[b.off]
		b.off++
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		if c < 0x80 {
			return v
		}
	}
}

// sleb reads a signed LEB128.
func (b *dbuf) sleb() int64 {
	var v int64
	var shift uint
	for {
		if b.off >= len(b.data) && !b.grow(1) {
			b.fail()
			return 0
		}
		c := b.data[b.off]
		b.off++
		if shift < 64 {
			v |= int64(c&0x7f) << shift
		}
		shift += 7
		if c < 0x80 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
}

// addr reads an address of size bytes (1, 2, 4 or 8).
func (b *dbuf) addr(size uint8) uint64 {
	switch size {
	case 8:
		return b.u64()
	case 4:
		return uint64(b.u32())
	case 2:
		return uint64(b.u16())
	case 1:
		return uint64(b.u8())
	}
	b.fail()
	return 0
}

// offset reads a section offset: 8 bytes in the 64-bit DWARF format,
// else 4.
func (b *dbuf) offset(dwarf64 bool) uint64 {
	if dwarf64 {
		return b.u64()
	}
	return uint64(b.u32())
}

// cstr reads a NUL-terminated string, without the NUL.
func (b *dbuf) cstr() []byte {
	for i := b.off; ; i++ {
		if i == len(b.data) && !b.grow(uint64(i-b.off+1)) {
			break
		}
		if b.data[i] == 0 {
			s := b.data[b.off:i]
			b.off = i + 1
			return s
		}
	}
	b.fail()
	return nil
}

// unitLength reads an initial length field: the length and whether the
// unit is in the 64-bit DWARF format.
func (b *dbuf) unitLength() (uint64, bool) {
	n := uint64(b.u32())
	if n == 0xffffffff {
		return b.u64(), true
	}
	if n >= 0xfffffff0 { // reserved
		b.fail()
	}
	return n, false
}

// cstrAt returns the NUL-terminated string at off in sec, "" when off
// is outside sec or the string is unterminated.
func cstrAt(sec []byte, off uint64) string {
	if off >= uint64(len(sec)) {
		return ""
	}
	b := dbuf{data: sec, off: int(off)}
	return string(b.cstr())
}

// formSize returns the size in bytes of a value of form in unit u when
// it is fixed, else -1 (LEB128s, strings, blocks, indirect).
func formSize(form uint16, u *unit) int {
	switch form {
	case formFlagPresent, formImplicitConst:
		return 0
	case formData1, formRef1, formFlag, formStrx1, formAddrx1:
		return 1
	case formData2, formRef2, formStrx2, formAddrx2:
		return 2
	case formStrx3, formAddrx3:
		return 3
	case formData4, formRef4, formRefSup4, formStrx4, formAddrx4:
		return 4
	case formData8, formRef8, formRefSig8, formRefSup8:
		return 8
	case formData16:
		return 16
	case formAddr:
		return int(u.addrSize)
	case formStrp, formLineStrp, formSecOffset, formStrpSup, formGNURefAlt, formGNUStrpAlt:
		return u.offSize()
	case formRefAddr:
		if u.version <= 2 {
			return int(u.addrSize)
		}
		return u.offSize()
	}
	return -1
}

// skipForm moves b past a value of form in unit u; it reports false for
// an unknown form (or an indirect chain), after which b is bad.
func skipForm(b *dbuf, form uint16, u *unit) bool {
	for hops := 0; hops < 4; hops++ {
		if n := formSize(form, u); n >= 0 {
			b.skip(uint64(n))
			return !b.bad
		}
		switch form {
		case formUdata, formSdata, formRefUdata, formStrx, formAddrx, formLoclistx, formRnglistx,
			formGNUAddrIndex, formGNUStrIndex:
			b.uleb()
		case formString:
			b.cstr()
		case formBlock1:
			b.skip(uint64(b.u8()))
		case formBlock2:
			b.skip(uint64(b.u16()))
		case formBlock4:
			b.skip(uint64(b.u32()))
		case formBlock, formExprloc:
			b.skip(b.uleb())
		case formIndirect:
			form = uint16(min(b.uleb(), 0xffff))
			continue
		default:
			b.fail()
			return false
		}
		return !b.bad
	}
	b.fail()
	return false
}
