package probe

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/gprofile/gprofile/internal/testutil"
)

// note builds one .note.stapsdt note as gcc lays it out (64-bit).
func note(pc, base, sem uint64, provider, name, args string) []byte {
	var b bytes.Buffer
	desc := binary.LittleEndian.AppendUint64(nil, pc)
	desc = binary.LittleEndian.AppendUint64(desc, base)
	desc = binary.LittleEndian.AppendUint64(desc, sem)
	desc = append(desc, provider+"\x00"+name+"\x00"+args+"\x00"...)
	binary.Write(&b, binary.LittleEndian, [3]uint32{8, uint32(len(desc)), ntStapsdt})
	b.WriteString("stapsdt\x00")
	b.Write(desc)
	for b.Len()%4 != 0 {
		b.WriteByte(0)
	}
	return b.Bytes()
}

func TestParseNotes(t *testing.T) {
	data := append(note(0x1130, 0x2004, 0x4010, "app", "start", "-4@%edi"), note(0x1140, 0x2004, 0, "app", "stop", "")...)
	got, err := parseNotes(data, binary.LittleEndian, 8)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Provider != "app" || got[0].Name != "start" || got[0].Args != "-4@%edi" ||
		got[0].PC != 0x1130 || got[0].base != 0x2004 || got[0].Semaphore != 0x4010 ||
		got[1].Name != "stop" || got[1].Semaphore != 0 {
		t.Errorf("parseNotes = %+v", got)
	}
	for _, cut := range []int{5, 13, len(data) - 3} {
		if _, err := parseNotes(data[:cut], binary.LittleEndian, 8); err == nil {
			t.Errorf("notes cut at %d bytes: no error", cut)
		}
	}
}

func TestAdjustPC(t *testing.T) {
	for _, c := range []struct{ pc, noteBase, base, want uint64 }{
		{0x1130, 0x2004, 0x2004, 0x1130}, // not prelinked
		{0x1130, 0x2004, 0x3004, 0x2130}, // sections moved up by 0x1000
		{0x1130, 0, 0x3004, 0x1130},      // no base recorded
		{0x1130, 0x2004, 0, 0x1130},      // no .stapsdt.base section
	} {
		if got := adjustPC(c.pc, c.noteBase, c.base); got != c.want {
			t.Errorf("adjustPC(%#x, %#x, %#x) = %#x, want %#x", c.pc, c.noteBase, c.base, got, c.want)
		}
	}
}

// TestNotesGCC reads the probes gcc and sys/sdt.h put in a binary, and
// checks them against readelf -n.
func TestNotesGCC(t *testing.T) {
	testutil.RequireFile(t, "/usr/include/x86_64-linux-gnu/sys/sdt.h", "apt install systemtap-sdt-dev")
	bin := testutil.BuildC(t, "testdata/usdt.c", "-O2")
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	notes, err := Notes(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 2 || notes[0].Name != "plain" || notes[1].Name != "withsem" {
		t.Fatalf("notes = %+v, want app:plain and app:withsem", notes)
	}
	if notes[0].Semaphore == 0 || notes[1].Semaphore == 0 || notes[0].Semaphore == notes[1].Semaphore || notes[1].SemaphoreOffset == 0 {
		t.Errorf("semaphores: %+v", notes)
	}
	readelf := testutil.RequireTool(t, "readelf")
	out, err := exec.Command(readelf, "-n", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range notes {
		// readelf prints the note's own (unadjusted) values; the binary
		// is not prelinked, so PC is the location.
		loc := "Location: 0x" + strings.Repeat("0", 16-len(hex(n.PC))) + hex(n.PC)
		if !strings.Contains(string(out), loc) {
			t.Errorf("%s:%s: %s not in readelf -n:\n%s", n.Provider, n.Name, loc, out)
		}
		ef, _ := elf.NewFile(f)
		if off, ok := fileOffset(ef, n.PC, elf.PF_X); !ok || off != n.Offset || n.Offset == 0 {
			t.Errorf("%s: offset %#x, want %#x", n.Name, n.Offset, off)
		}
	}
	funcs, err := Funcs(f)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Match(funcs, "ma*")
	if err != nil || len(m) != 1 || m[0].Name != "main" || m[0].Offset == 0 {
		t.Errorf("Match(ma*) = %+v, %v; want main", m, err)
	}
	if _, err := Match(funcs, "[x"); err == nil {
		t.Error("Match([x): no error for a bad pattern")
	}
}

func hex(v uint64) string { return strconv.FormatUint(v, 16) }

func TestNotesNoSection(t *testing.T) {
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	if _, err := Notes(self); !errors.Is(err, ErrNoNotes) {
		t.Errorf("Notes(test binary) = %v, want ErrNoNotes", err)
	}
	if _, err := Notes(bytes.NewReader([]byte("not an ELF file"))); err == nil {
		t.Error("Notes(garbage): no error")
	}
}

// FuzzParseNotes: no input makes the note parser panic or return notes
// with empty names.
func FuzzParseNotes(f *testing.F) {
	f.Add(note(0x1130, 0x2004, 0x4010, "app", "start", "-4@%edi"))
	f.Add(append(note(1, 2, 3, "a", "b", ""), note(4, 5, 6, "c", "d", "8@%rax")...))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, size := range []int{4, 8} {
			notes, err := parseNotes(data, binary.LittleEndian, size)
			if err != nil {
				continue
			}
			for _, n := range notes {
				if n.Provider == "" || n.Name == "" {
					t.Errorf("note with an empty provider or name: %+v", n)
				}
			}
		}
	})
}
