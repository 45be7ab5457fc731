package symbolize

import (
	"os"
	"testing"
)

// textMapping returns the /proc/PID/maps line the kernel would write for
// the executable segment of the ELF at path loaded with bias base.
func textMapping(t testing.TB, path string, base uint64) MapsEntry {
	t.Helper()
	seg := execSegment(t, path)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	mask := pageSize - 1
	e := MapsEntry{
		Start:  base + seg.Vaddr&^mask,
		Limit:  base + (seg.Vaddr+seg.Memsz+mask)&^mask,
		Offset: seg.Off &^ mask,
		Perms:  "r-xp",
		Path:   path,
	}
	e.Device, e.Inode = statDevIno(st)
	return e
}
