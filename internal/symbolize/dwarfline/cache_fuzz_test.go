package dwarfline

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
)

// FuzzSectionCacheLoad: whatever bytes a cache file holds (a torn write,
// another program's file, a hostile user's), load returns a prefix length
// within the section whose bytes are the file's and check out against the
// header's CRC-32C, or 0; open agrees with load; and what save writes,
// load reads back.
func FuzzSectionCacheLoad(f *testing.F) {
	valid := func(total uint64, prefix []byte) []byte {
		var hdr [cacheHeaderLen]byte
		copy(hdr[:], cacheMagic)
		binary.LittleEndian.PutUint64(hdr[8:], total)
		binary.LittleEndian.PutUint64(hdr[16:], uint64(len(prefix)))
		binary.LittleEndian.PutUint32(hdr[24:], crc32.Checksum(prefix, castagnoli))
		return append(hdr[:], prefix...)
	}
	f.Add(valid(16, []byte("0123456789")), uint16(16))
	f.Add(valid(16, []byte("0123456789")), uint16(15))
	f.Add(valid(4, []byte("0123456789")), uint16(4))
	f.Add(valid(16, nil), uint16(16))
	f.Add([]byte(cacheMagic), uint16(8))
	f.Add([]byte{}, uint16(0))
	dir := f.TempDir()
	c := NewSectionCache(dir, 1<<20)
	f.Fuzz(func(t *testing.T, file []byte, total uint16) {
		s := c.slot("0011223344", "info", 1234)
		if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(s.path, file, 0o600); err != nil {
			t.Fatal(err)
		}
		out := make([]byte, total)
		n := s.load(out)
		if n < 0 || n > len(out) {
			t.Fatalf("load = %d for a %d-byte section", n, len(out))
		}
		if n > 0 {
			le := binary.LittleEndian
			if len(file) < cacheHeaderLen+n || !bytes.Equal(out[:n], file[cacheHeaderLen:cacheHeaderLen+n]) ||
				le.Uint64(file[8:]) != uint64(total) || le.Uint64(file[16:]) != uint64(n) ||
				crc32.Checksum(out[:n], castagnoli) != le.Uint32(file[24:]) {
				t.Fatalf("load = %d: not the file's checked prefix", n)
			}
		}
		// open checks the same, and its file holds the prefix.
		if of, on, _ := s.open(int(total)); on != n || (of == nil) != (n == 0) {
			t.Fatalf("open = %d (file %v), load = %d", on, of != nil, n)
		} else if of != nil {
			got := make([]byte, on)
			_, err := of.ReadAt(got, cacheHeaderLen)
			of.Close()
			if err != nil || !bytes.Equal(got, out[:n]) {
				t.Fatalf("open's file does not hold load's prefix (%v)", err)
			}
		}
		// What save writes, load reads back whole.
		if len(file) > 0 && len(file) <= int(total) {
			s.save(file, int(total))
			back := make([]byte, total)
			if got := s.load(back); got != len(file) || !bytes.Equal(back[:got], file) {
				t.Fatalf("saved %d bytes of %d, loaded %d", len(file), total, got)
			}
		}
	})
}
