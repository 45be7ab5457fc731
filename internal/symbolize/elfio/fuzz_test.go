package elfio

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"testing"
)

func FuzzBuildIDNote(f *testing.F) {
	ef, err := elf.NewFile(bytes.NewReader(tinyELF(f)))
	if err != nil {
		f.Fatal(err)
	}
	note, err := ef.Section(".note.gnu.build-id").Data()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(note, false)
	f.Add(append([]byte("\x04\x00\x00\x00\x10\x00\x00\x00\x05\x00\x00\x00GNU\x00"), note...), true)
	f.Fuzz(func(t *testing.T, data []byte, align8 bool) {
		align := uint64(4)
		if align8 {
			align = 8
		}
		id := noteBuildID(binary.LittleEndian, bytes.NewReader(data), align)
		if len(id)%2 != 0 || len(id) > 2*len(data) {
			t.Errorf("build ID %q from %d bytes", id, len(data))
		}
	})
}

// tinyELF returns testdata/fuzz/tiny.elf (see testdata/fuzz/README).
func tinyELF(f testing.TB) []byte {
	data, err := os.ReadFile("../testdata/fuzz/tiny.elf")
	if err != nil {
		f.Fatal(err)
	}
	return data
}
