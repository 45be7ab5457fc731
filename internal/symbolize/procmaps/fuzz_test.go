package procmaps

import (
	"bytes"
	"os"
	"testing"
)

// The fuzz targets check that the parsers never panic; go test runs their
// seeds, go test -fuzz explores further.

func FuzzParseMaps(f *testing.F) {
	seed, err := os.ReadFile("../testdata/maps.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte("7f0000300000-7f0000301000 rw-p 00000000 00:00 0 \n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, _ := Parse(bytes.NewReader(data))
		for _, e := range entries {
			if e.Limit < e.Start {
				t.Errorf("entry %+v has Limit < Start", e)
			}
		}
	})
}
