package textscan

import (
	"io"
	"slices"
)

// ReadAll reads r to its end in large reads, starting with size bytes
// and doubling.
func ReadAll(r io.Reader, size int) ([]byte, error) {
	return ReadInto(r, make([]byte, 0, size))
}

// ReadInto is ReadAll appending to buf (of capacity at least 1), which
// it grows by doubling as needed.
func ReadInto(r io.Reader, buf []byte) ([]byte, error) {
	if cap(buf) == 0 {
		buf = make([]byte, 0, 4096)
	}
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, cap(buf))
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// ParseHex parses the leading hex digits of b (at most 16) and returns the
// value and how many bytes it used; ok is false when there are none or too
// many.
func ParseHex(b []byte) (v uint64, n int, ok bool) {
	for n < len(b) {
		d := HexDigit[b[n]]
		if d > 0xf {
			break
		}
		v = v<<4 | uint64(d)
		n++
	}
	return v, n, n > 0 && n <= 16
}

// HexDigit maps a byte to its value as a hex digit, or to 0xff.
var HexDigit = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for i := 0; i < 10; i++ {
		t['0'+i] = byte(i)
	}
	for i := 0; i < 6; i++ {
		t['a'+i], t['A'+i] = byte(10+i), byte(10+i)
	}
	return t
}()

// Newline splits the line-based files this package parses.
var Newline = []byte{'\n'}
