package output

import (
	"bufio"
	"io"
	"slices"

	"github.com/google/pprof/profile"
)

// EncodePprof writes p, uncompressed, in the protobuf encoding of
// profile.proto: the bytes profile.Profile.WriteUncompressed writes
// (field for field, the string table in the same order:
// TestEncodePprofMatches, FuzzEncodePprof), but as a stream. Each
// top-level message is encoded into one reused buffer and written with
// its length, where WriteUncompressed grows one buffer to the whole
// profile, shifts every message in it to insert its length, and
// allocates per sample (BenchmarkWritePprof). It does not change p.
// Errors are w's.
func EncodePprof(w io.Writer, p *profile.Profile) error {
	e := &pprofEncoder{w: bufio.NewWriterSize(w, 32<<10), strs: map[string]int64{}}
	e.stringTable(p)
	e.messages(p)
	return e.w.Flush()
}

// pprofEncoder holds EncodePprof's state. Writes to w fail silently
// after the first error, which Flush returns.
type pprofEncoder struct {
	w     *bufio.Writer
	buf   []byte           // the message being encoded
	strs  map[string]int64 // string -> index in table
	table []string
	keys  []string // a sample's label keys, sorted
	hdr   [20]byte // a message's key and length
}

// str returns the index of s in the string table, adding it.
func (e *pprofEncoder) str(s string) int64 {
	i, ok := e.strs[s]
	if !ok {
		i = int64(len(e.table))
		e.strs[s] = i
		e.table = append(e.table, s)
	}
	return i
}

// sortedKeys returns the keys of m, sorted, in e.keys.
func sortedKeys[V any](e *pprofEncoder, m map[string]V) []string {
	e.keys = e.keys[:0]
	for k := range m {
		e.keys = append(e.keys, k)
	}
	slices.Sort(e.keys)
	return e.keys
}

// stringTable adds p's strings in the order of pprof's preEncode, so that
// each gets the index WriteUncompressed gives it.
func (e *pprofEncoder) stringTable(p *profile.Profile) {
	e.str("")
	for _, st := range p.SampleType {
		e.str(st.Type)
		e.str(st.Unit)
	}
	for _, s := range p.Sample {
		for _, k := range sortedKeys(e, s.Label) {
			for _, v := range s.Label[k] {
				e.str(k)
				e.str(v)
			}
		}
		for _, k := range sortedKeys(e, s.NumLabel) {
			e.str(k)
			if units := s.NumUnit[k]; len(units) != 0 {
				for i := range s.NumLabel[k] {
					e.str(units[i])
				}
			}
		}
	}
	for _, m := range p.Mapping {
		e.str(m.File)
		e.str(m.BuildID)
	}
	for _, f := range p.Function {
		e.str(f.Name)
		e.str(f.SystemName)
		e.str(f.Filename)
	}
	e.str(p.DropFrames)
	e.str(p.KeepFrames)
	if pt := p.PeriodType; pt != nil {
		e.str(pt.Type)
		e.str(pt.Unit)
	}
	for _, c := range p.Comments {
		e.str(c)
	}
	e.str(p.DefaultSampleType)
	e.str(p.DocURL)
}

// messages writes p's fields in the order of pprof's Profile.encode.
func (e *pprofEncoder) messages(p *profile.Profile) {
	for _, st := range p.SampleType {
		e.buf = e.valueType(e.buf[:0], st)
		e.message(1)
	}
	for _, s := range p.Sample {
		e.sample(s)
		e.message(2)
	}
	for _, m := range p.Mapping {
		b := appendUint64Opt(e.buf[:0], 1, m.ID)
		b = appendUint64Opt(b, 2, m.Start)
		b = appendUint64Opt(b, 3, m.Limit)
		b = appendUint64Opt(b, 4, m.Offset)
		b = appendUint64Opt(b, 5, uint64(e.strs[m.File]))
		b = appendUint64Opt(b, 6, uint64(e.strs[m.BuildID]))
		b = appendBoolOpt(b, 7, m.HasFunctions)
		b = appendBoolOpt(b, 8, m.HasFilenames)
		b = appendBoolOpt(b, 9, m.HasLineNumbers)
		b = appendBoolOpt(b, 10, m.HasInlineFrames)
		e.buf = b
		e.message(3)
	}
	for _, l := range p.Location {
		b := appendUint64Opt(e.buf[:0], 1, l.ID)
		if l.Mapping != nil {
			b = appendUint64Opt(b, 2, l.Mapping.ID)
		}
		b = appendUint64Opt(b, 3, l.Address)
		for i := range l.Line {
			ln := &l.Line[i]
			var fn uint64
			if ln.Function != nil {
				fn = ln.Function.ID
			}
			size := sizeOpt(1, fn) + sizeOpt(2, uint64(ln.Line)) + sizeOpt(3, uint64(ln.Column))
			b = appendKey(b, 4, 2)
			b = appendVarint(b, uint64(size))
			b = appendUint64Opt(b, 1, fn)
			b = appendUint64Opt(b, 2, uint64(ln.Line))
			b = appendUint64Opt(b, 3, uint64(ln.Column))
		}
		b = appendBoolOpt(b, 5, l.IsFolded)
		e.buf = b
		e.message(4)
	}
	for _, f := range p.Function {
		b := appendUint64Opt(e.buf[:0], 1, f.ID)
		b = appendUint64Opt(b, 2, uint64(e.strs[f.Name]))
		b = appendUint64Opt(b, 3, uint64(e.strs[f.SystemName]))
		b = appendUint64Opt(b, 4, uint64(e.strs[f.Filename]))
		b = appendUint64Opt(b, 5, uint64(f.StartLine))
		e.buf = b
		e.message(5)
	}
	for _, s := range e.table {
		b := appendKey(e.buf[:0], 6, 2)
		b = appendVarint(b, uint64(len(s)))
		e.w.Write(b)
		e.w.WriteString(s)
		e.buf = b
	}
	b := appendUint64Opt(e.buf[:0], 7, uint64(e.strs[p.DropFrames]))
	b = appendUint64Opt(b, 8, uint64(e.strs[p.KeepFrames]))
	b = appendUint64Opt(b, 9, uint64(p.TimeNanos))
	b = appendUint64Opt(b, 10, uint64(p.DurationNanos))
	if pt := p.PeriodType; pt != nil && (e.strs[pt.Type] != 0 || e.strs[pt.Unit] != 0) {
		vt := e.valueType(nil, pt)
		b = appendKey(b, 11, 2)
		b = appendVarint(b, uint64(len(vt)))
		b = append(b, vt...)
	}
	b = appendUint64Opt(b, 12, uint64(p.Period))
	b = appendRepeated(b, 13, len(p.Comments), func(i int) uint64 { return uint64(e.strs[p.Comments[i]]) })
	b = appendKey(b, 14, 0) // not optional in pprof's encoding
	b = appendVarint(b, uint64(e.strs[p.DefaultSampleType]))
	b = appendUint64Opt(b, 15, uint64(e.strs[p.DocURL]))
	e.w.Write(b)
	e.buf = b
}

// message writes e.buf as the field tag, length-delimited.
func (e *pprofEncoder) message(tag int) {
	h := appendKey(e.hdr[:0], tag, 2)
	h = appendVarint(h, uint64(len(e.buf)))
	e.w.Write(h)
	e.w.Write(e.buf)
}

// valueType appends the fields of a ValueType to b.
func (e *pprofEncoder) valueType(b []byte, vt *profile.ValueType) []byte {
	b = appendUint64Opt(b, 1, uint64(e.strs[vt.Type]))
	return appendUint64Opt(b, 2, uint64(e.strs[vt.Unit]))
}

// sample encodes the fields of s into e.buf: location IDs, values, then
// its labels in pprof's order (string labels by key, then numeric ones).
func (e *pprofEncoder) sample(s *profile.Sample) {
	b := e.buf[:0]
	b = appendRepeated(b, 1, len(s.Location), func(i int) uint64 { return s.Location[i].ID })
	b = appendRepeated(b, 2, len(s.Value), func(i int) uint64 { return uint64(s.Value[i]) })
	label := func(b []byte, key, str, num, unit uint64) []byte {
		size := sizeOpt(1, key) + sizeOpt(2, str) + sizeOpt(3, num) + sizeOpt(4, unit)
		b = appendKey(b, 3, 2)
		b = appendVarint(b, uint64(size))
		b = appendUint64Opt(b, 1, key)
		b = appendUint64Opt(b, 2, str)
		b = appendUint64Opt(b, 3, num)
		return appendUint64Opt(b, 4, unit)
	}
	for _, k := range sortedKeys(e, s.Label) {
		key := uint64(e.strs[k])
		for _, v := range s.Label[k] {
			b = label(b, key, uint64(e.strs[v]), 0, 0)
		}
	}
	for _, k := range sortedKeys(e, s.NumLabel) {
		key := uint64(e.strs[k])
		units := s.NumUnit[k]
		for i, v := range s.NumLabel[k] {
			var unit uint64
			if len(units) != 0 {
				unit = uint64(e.strs[units[i]])
			}
			b = label(b, key, 0, uint64(v), unit)
		}
	}
	e.buf = b
}

// appendRepeated appends the n values at(0) … at(n-1) as field tag:
// packed when there are more than two, else one field each (pprof's
// encodeUint64s and encodeInt64s; an int64 as its two's complement).
func appendRepeated(b []byte, tag, n int, at func(int) uint64) []byte {
	if n > 2 {
		size := 0
		for i := range n {
			size += sizeVarint(at(i))
		}
		b = appendKey(b, tag, 2)
		b = appendVarint(b, uint64(size))
		for i := range n {
			b = appendVarint(b, at(i))
		}
		return b
	}
	for i := range n {
		b = appendKey(b, tag, 0)
		b = appendVarint(b, at(i))
	}
	return b
}

// appendKey appends the key of field tag with wire type typ (0 varint,
// 2 length-delimited).
func appendKey(b []byte, tag, typ int) []byte {
	return appendVarint(b, uint64(tag)<<3|uint64(typ))
}

func appendVarint(b []byte, x uint64) []byte {
	for x >= 0x80 {
		b = append(b, byte(x)|0x80)
		x >>= 7
	}
	return append(b, byte(x))
}

// sizeVarint returns the bytes of x as a varint.
func sizeVarint(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// appendUint64Opt appends field tag when x is not 0 (int64 fields are
// encoded as their two's complement, as pprof does).
func appendUint64Opt(b []byte, tag int, x uint64) []byte {
	if x == 0 {
		return b
	}
	b = appendKey(b, tag, 0)
	return appendVarint(b, x)
}

// sizeOpt is the size of what appendUint64Opt appends.
func sizeOpt(tag int, x uint64) int {
	if x == 0 {
		return 0
	}
	return sizeVarint(uint64(tag)<<3) + sizeVarint(x)
}

func appendBoolOpt(b []byte, tag int, x bool) []byte {
	if !x {
		return b
	}
	return appendUint64Opt(b, tag, 1)
}
