package objfile

import (
	"bytes"
	"errors"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/debuginfo"
	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
)

func FuzzNewBinary(f *testing.F) {
	seed := symtest.TinyELF(f)
	f.Add(seed)
	f.Add(seed[:len(seed)/2])
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := Load(bytes.NewReader(data), debuginfo.Options{DebugDirs: []string{}})
		if err != nil {
			if !errors.Is(err, ErrBadELF) {
				t.Errorf("error %v does not wrap ErrBadELF", err)
			}
			return
		}
		for _, p := range b.Loads() {
			b.Bias(0x400000, p.Off)
		}
		n := min(b.Len(), 64)
		for i := 0; i < n; i++ {
			s := &b.syms[i]
			if sym, ok := b.Lookup(s.start); !ok || sym.Start > s.start {
				t.Errorf("Lookup(%#x) = %+v, %v", s.start, sym, ok)
			}
			b.Lines(s.start)
			b.Lines(s.end - 1)
		}
	})
}
