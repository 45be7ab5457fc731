package symbolize

import (
	"bytes"
	"os"
	"testing"
)

// The fuzz targets check that the parsers never panic; go test runs their
// seeds, go test -fuzz explores further.

func FuzzParseMaps(f *testing.F) {
	seed, err := os.ReadFile("testdata/maps.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte("7f0000300000-7f0000301000 rw-p 00000000 00:00 0 \n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, _ := ParseMaps(bytes.NewReader(data))
		for _, e := range entries {
			if e.Limit < e.Start {
				t.Errorf("entry %+v has Limit < Start", e)
			}
		}
	})
}

func FuzzParseKallsyms(f *testing.F) {
	seed, err := os.ReadFile("testdata/kallsyms.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed, uint64(0xffffffff81000010))
	f.Fuzz(func(t *testing.T, data []byte, addr uint64) {
		k, err := ParseKallsyms(bytes.NewReader(data))
		if err != nil {
			return
		}
		if sym, ok := k.Lookup(addr); ok && sym.Start > addr {
			t.Errorf("Lookup(%#x) = %+v starts after the address", addr, sym)
		}
		k.Modules()
	})
}

func FuzzUnxz(f *testing.F) {
	seed, err := os.ReadFile("testdata/seed.xz") // made with xz -z
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := unxz(data, 1<<16)
		if err == nil && len(out) > 1<<16 {
			t.Errorf("unxz returned %d bytes, over its cap", len(out))
		}
	})
}
