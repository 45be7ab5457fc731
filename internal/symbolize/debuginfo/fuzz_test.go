package debuginfo

import (
	"os"
	"testing"
)

func FuzzUnxz(f *testing.F) {
	seed, err := os.ReadFile("../testdata/seed.xz") // made with xz -z
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := Unxz(data, 1<<16)
		if err == nil && len(out) > 1<<16 {
			t.Errorf("unxz returned %d bytes, over its cap", len(out))
		}
	})
}
