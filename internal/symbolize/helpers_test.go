package symbolize

import (
	"os"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/procmaps"

	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
	"github.com/gprofile/gprofile/internal/symbolize/objfile"
)

// textMapping returns the /proc/PID/maps line the kernel would write for
// the executable segment of the ELF at path loaded with bias base.
func textMapping(t testing.TB, path string, base uint64) procmaps.Entry {
	t.Helper()
	seg := symtest.ExecSegment(t, path)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	mask := objfile.PageSize - 1
	e := procmaps.Entry{
		Start:  base + seg.Vaddr&^mask,
		Limit:  base + (seg.Vaddr+seg.Memsz+mask)&^mask,
		Offset: seg.Off &^ mask,
		Perms:  "r-xp",
		Path:   path,
	}
	e.Device, e.Inode = symtest.StatDevIno(st)
	return e
}
