package kallsyms

import (
	"bytes"
	"os"
	"testing"
)

func FuzzParseKallsyms(f *testing.F) {
	seed, err := os.ReadFile("../testdata/kallsyms.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed, uint64(0xffffffff81000010))
	f.Fuzz(func(t *testing.T, data []byte, addr uint64) {
		k, err := Parse(bytes.NewReader(data))
		if err != nil {
			return
		}
		if sym, ok := k.Lookup(addr); ok && sym.Start > addr {
			t.Errorf("Lookup(%#x) = %+v starts after the address", addr, sym)
		}
		k.Modules()
	})
}
