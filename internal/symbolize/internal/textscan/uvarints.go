package textscan

import "encoding/binary"

// Uvarints reads a run of uvarint fields, as gprofile's cache files
// encode them (objfile's line memo, symbolize's kernel name memo): each
// Next or Bytes takes from the front of Rest. A truncated or overlong
// field sets Bad and empties Rest, so every later read is empty too.
type Uvarints struct {
	Rest []byte
	Bad  bool
}

// Next returns the next uvarint, or 0 (setting Bad) when Rest holds
// none.
func (r *Uvarints) Next() uint64 {
	v, n := binary.Uvarint(r.Rest)
	if n <= 0 {
		r.Bad, r.Rest = true, nil
		return 0
	}
	r.Rest = r.Rest[n:]
	return v
}

// Bytes returns the next n bytes, or nil (setting Bad) when Rest holds
// fewer.
func (r *Uvarints) Bytes(n uint64) []byte {
	if n > uint64(len(r.Rest)) {
		r.Bad, r.Rest = true, nil
		return nil
	}
	b := r.Rest[:n:n]
	r.Rest = r.Rest[n:]
	return b
}
