package unwind

import (
	"encoding/binary"
	"errors"
)

var errShort = errors.New("truncated")

// buf is a bounds-checked little-endian cursor over CFI bytes. Reads past
// the end set err and return 0, so parsers check err once per record.
type buf struct {
	b   []byte
	off int
	err error
}

func (r *buf) fail() {
	if r.err == nil {
		r.err = errShort
	}
	r.off = len(r.b)
}

func (r *buf) left() int { return len(r.b) - r.off }

func (r *buf) u8() uint8 {
	if r.off >= len(r.b) {
		r.fail()
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

func (r *buf) bytes(n uint64) []byte {
	if n > uint64(r.left()) {
		r.fail()
		return nil
	}
	v := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return v
}

func (r *buf) u16() uint16 {
	b := r.bytes(2)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint16(b)
}

func (r *buf) u32() uint32 {
	b := r.bytes(4)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}

func (r *buf) u64() uint64 {
	b := r.bytes(8)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}

func (r *buf) uleb() uint64 {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		c := r.u8()
		if r.err != nil {
			return 0
		}
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		if c&0x80 == 0 {
			return v
		}
	}
}

func (r *buf) sleb() int64 {
	var v int64
	var shift uint
	for {
		c := r.u8()
		if r.err != nil {
			return 0
		}
		if shift < 64 {
			v |= int64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
}

func (r *buf) cstring() string {
	for i := r.off; i < len(r.b); i++ {
		if r.b[i] == 0 {
			s := string(r.b[r.off:i])
			r.off = i + 1
			return s
		}
	}
	r.fail()
	return ""
}
