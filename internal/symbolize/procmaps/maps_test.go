package procmaps

import (
	"errors"
	"os"
	"strings"
	"testing"
	"testing/iotest"

	"golang.org/x/sys/unix"
)

func TestParseMaps(t *testing.T) {
	f, err := os.Open("../testdata/maps.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := Parse(f)
	var syntax *SyntaxError
	if !errors.As(err, &syntax) || syntax.Line != 9 || syntax.Skipped != 1 ||
		syntax.Text != "this is not a maps line" {
		t.Fatalf("ParseMaps error = %v; want one skipped line at line 9", err)
	}
	want := []Entry{
		{0x400000, 0x452000, 0, "r-xp", unix.Mkdev(0xfd, 1), 1234, "/usr/bin/prog", false},
		{0x651000, 0x652000, 0x51000, "rw-p", unix.Mkdev(0xfd, 1), 1234, "/usr/bin/prog", false},
		{0x1a2b000, 0x1a4c000, 0, "rw-p", 0, 0, "[heap]", false},
		{0x7f0000000000, 0x7f0000021000, 0, "r-xp", unix.Mkdev(0x103, 2), 5678, "/opt/my app/lib with  spaces.so", false},
		{0x7f0000100000, 0x7f0000200000, 0x1000, "r-xp", unix.Mkdev(0xfd, 1), 999, "/tmp/old.so", true},
		{0x7f0000300000, 0x7f0000301000, 0, "rw-p", 0, 0, "", false},
		{0x7ffd5a1f0000, 0x7ffd5a1f2000, 0, "r-xp", 0, 0, "[vdso]", false},
		{0xffffffffff600000, 0xffffffffff601000, 0, "--xp", 0, 0, "[vsyscall]", false},
		{0x7f0000400000, 0x7f0000500000, 0, "r-xp", 0, 0, "[anon:jit code]", false},
		{0x7f0000600000, 0x7f0000700000, 0, "r-xp", 0, 0, "", false},
	}
	if len(got) != len(want) {
		t.Fatalf("ParseMaps = %d entries, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d = %+v\n want %+v", i, got[i], want[i])
		}
	}
	if !got[0].Executable() || got[1].Executable() {
		t.Error("Executable() wrong for r-xp / rw-p")
	}
}

func TestParseMapsMalformed(t *testing.T) {
	for _, line := range []string{
		"00400000 r-xp 00000000 fd:01 1234 /a",                            // no limit
		"00452000-00400000 r-xp 00000000 fd:01 1234 /a",                   // limit below start
		"00400000-00452000 r-xp 00000000 fd01 1234 /a",                    // device without colon
		"00400000-00452000 r-xp 00000000 fd:01 x /a",                      // inode not a number
		"00400000-00452000 r-xp 00000000 fd:01 12x4 /a",                   // junk after inode
		"00400000-00452000 r-xp",                                          // truncated
		"00400000-00452000 r-xp 0000000g fd:01 1234 /a",                   // bad offset
		"00400000-00452000 r-xp 00000000 fd:01 1234567890123456789012 /a", // inode overflow
	} {
		got, err := Parse(strings.NewReader(line + "\n"))
		var syntax *SyntaxError
		if len(got) != 0 || !errors.As(err, &syntax) || syntax.Skipped != 1 {
			t.Errorf("ParseMaps(%q) = %+v, %v; want skipped line", line, got, err)
		}
	}
}

func TestParseMapsReadError(t *testing.T) {
	_, err := Parse(iotest.ErrReader(errors.New("boom")))
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("ParseMaps(failing reader) error = %v", err)
	}
}

func TestParseMapsSelf(t *testing.T) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entries, err := Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	found := false
	for _, e := range entries {
		found = found || (e.Path == exe && e.Executable() && e.Inode != 0)
	}
	if !found {
		t.Errorf("no executable mapping of %s in /proc/self/maps: %+v", exe, entries)
	}
}
