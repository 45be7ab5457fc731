package ksym

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
	"github.com/gprofile/gprofile/internal/symbolize/internal/textscan"
	"github.com/gprofile/gprofile/internal/symbolize/kallsyms"
)

// sameKallsyms fails t unless got and want, made of the kallsyms text
// text, name every address the same: the same symbol count, Hidden, text
// range and modules, and the same Lookup at each listed address and the
// byte after it (aliases, globals, modules and section bounds).
func sameKallsyms(t *testing.T, got, want *kallsyms.Table, text []byte) {
	t.Helper()
	gs, ge, gok := got.TextRange()
	ws, we, wok := want.TextRange()
	if got.Len() != want.Len() || got.Hidden() != want.Hidden() || gs != ws || ge != we || gok != wok {
		t.Fatalf("got %d symbols, hidden %v, text [%#x, %#x) %v; want %d, %v, [%#x, %#x) %v",
			got.Len(), got.Hidden(), gs, ge, gok, want.Len(), want.Hidden(), ws, we, wok)
	}
	bad := 0
	for _, line := range strings.Split(string(text), "\n") {
		addr, err := strconv.ParseUint(strings.SplitN(line, " ", 2)[0], 16, 64)
		if err != nil {
			continue
		}
		for _, a := range []uint64{addr, addr + 1} {
			g, gok := got.Lookup(a)
			w, wok := want.Lookup(a)
			if (g != w || gok != wok) && bad < 10 {
				t.Errorf("Lookup(%#x) = %+v, %v; want %+v, %v", a, g, gok, w, wok)
				bad++
			}
		}
	}
	if g, w := fmt.Sprint(got.Modules()), fmt.Sprint(want.Modules()); g != w {
		t.Errorf("Modules() = %s, want %s", g, w)
	}
}

// TestKallsymsIterFixture: the records of the fixture make the table its
// text makes, in any split of the stream into reads.
func TestKallsymsIterFixture(t *testing.T) {
	for _, file := range []string{"../testdata/kallsyms.txt", "../testdata/kallsyms_hidden.txt"} {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		want, err := kallsyms.Parse(bytes.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		recs := symtest.KallsymsRecords(t, text)
		for chunk := 1; chunk <= 80; chunk++ {
			k, err := parseIter(bytes.NewReader(recs), chunk)
			if err != nil {
				t.Fatalf("%s, chunk %d: %v", file, chunk, err)
			}
			sameKallsyms(t, k, want, text)
		}
		k, err := ParseIter(iotest.OneByteReader(bytes.NewReader(recs)))
		if err != nil {
			t.Fatalf("%s, one byte a read: %v", file, err)
		}
		sameKallsyms(t, k, want, text)
	}
}

// TestKallsymsIterLookup: what the fixture's records give Lookup, and
// Hidden for all-zero addresses.
func TestKallsymsIterLookup(t *testing.T) {
	text, err := os.ReadFile("../testdata/kallsyms.txt")
	if err != nil {
		t.Fatal(err)
	}
	k, err := ParseIter(bytes.NewReader(symtest.KallsymsRecords(t, text)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		addr, start  uint64
		name, module string
	}{
		{0xffffffff81000000, 0xffffffff81000000, "startup_64", ""}, // global wins, markers dropped
		{0xffffffff81001010, 0xffffffff81001010, "abort", ""},
		{0xffffffffc0001150, 0xffffffffc0001100, "ext4_bar", "ext4"},
		{0xffffffffc0300010, 0xffffffffc0300000, "bpf_prog_6deef7357e7b4530_sd_fw_egress", "bpf"},
		{0xffffffff81002800, 0, "", ""}, // _etext bounds the text
	} {
		sym, ok := k.Lookup(tt.addr)
		if ok != (tt.name != "") || sym != (kallsyms.Symbol{Name: tt.name, Start: tt.start, Module: tt.module}) {
			t.Errorf("Lookup(%#x) = %+v, %v; want {%s %#x %s}", tt.addr, sym, ok, tt.name, tt.start, tt.module)
		}
	}
	hidden := symtest.AppendRecord(symtest.AppendRecord(nil, 0, 'T', "_stext", ""), 0, 't', "ext4_foo", "ext4")
	if k, err := ParseIter(bytes.NewReader(hidden)); err != nil || !k.Hidden() || k.Len() != 0 {
		t.Errorf("ParseKallsymsIter(zero addresses) = %v, %v; want Hidden", k, err)
	}
}

// TestKallsymsIterReal: the records of this machine's /proc/kallsyms
// make the table its text makes (hidden too when not root).
func TestKallsymsIterReal(t *testing.T) {
	text, _ := symtest.Kallsyms(t)
	want, err := kallsyms.Parse(bytes.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	k, err := ParseIter(bytes.NewReader(symtest.KallsymsRecords(t, text)))
	if err != nil {
		t.Fatal(err)
	}
	sameKallsyms(t, k, want, text)
	t.Logf("%d symbols kept of %d lines, hidden %v", k.Len(), bytes.Count(text, textscan.Newline), k.Hidden())
}

// TestKallsymsIterErrors: truncated and corrupt streams fail with an
// error that names the record, never a panic.
func TestKallsymsIterErrors(t *testing.T) {
	good := symtest.AppendRecord(nil, 0xffffffff81000000, 'T', "startup_64", "")
	header := func(nameLen uint16, modLen byte) []byte {
		b := binary.LittleEndian.AppendUint64(append([]byte{}, good...), 0xffffffff81000010)
		b = binary.LittleEndian.AppendUint16(b, nameLen)
		return append(b, 'T', modLen)
	}
	boom := errors.New("boom")
	for _, tt := range []struct {
		name string
		r    io.Reader
		want string
	}{
		{"empty", bytes.NewReader(nil), "no symbols"},
		{"cut in the header", bytes.NewReader(append(append([]byte{}, good...), good[:7]...)), "record 2: cut short at 7 bytes"},
		{"cut in the name", bytes.NewReader(good[:len(good)-1]), "record 1: cut short at 21 bytes"},
		{"cut in the module", bytes.NewReader(symtest.AppendRecord(nil, 1, 't', "f", "ext4")[:15]), "record 1: cut short at 15 bytes"},
		{"empty name", bytes.NewReader(header(0, 0)), "record 2: malformed header"},
		{"name over 512 bytes", bytes.NewReader(header(513, 0)), "name 513 bytes"},
		{"module over 56 bytes", bytes.NewReader(append(header(1, 57), make([]byte, 58)...)), "module 57 bytes"},
		{"read error", io.MultiReader(bytes.NewReader(good), iotest.ErrReader(boom)), "boom"},
	} {
		k, err := ParseIter(tt.r)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: ParseKallsymsIter = %v, %v; want an error with %q", tt.name, k, err, tt.want)
		}
	}
	// A bad record stops the reader; the error counts records from 1.
	bad := bytes.Repeat(good, 10000)
	bad = append(append(bad, header(600, 0)[len(good):]...), bytes.Repeat(good, 10000)...)
	if _, err := ParseIter(bytes.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "record 10001:") {
		t.Errorf("ParseKallsymsIter(bad record 10001) error = %v", err)
	}
}

// FuzzKallsymsIterRecords: any stream parses or fails cleanly, and a
// table that parses answers lookups sanely.
func FuzzKallsymsIterRecords(f *testing.F) {
	text, err := os.ReadFile("../testdata/kallsyms.txt")
	if err != nil {
		f.Fatal(err)
	}
	seed := symtest.KallsymsRecords(f, text)
	f.Add(seed, uint64(0xffffffff81000010), uint8(0))
	f.Add(seed[:len(seed)-5], uint64(0xffffffffc0300010), uint8(3))
	f.Add(symtest.AppendRecord(nil, 0, 'T', "x", ""), uint64(0), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, addr uint64, chunk uint8) {
		k, err := parseIter(bytes.NewReader(data), int(chunk)%64+1)
		if err != nil {
			return
		}
		if sym, ok := k.Lookup(addr); ok && (sym.Start > addr || k.Hidden()) {
			t.Errorf("Lookup(%#x) = %+v (hidden %v)", addr, sym, k.Hidden())
		}
		k.Modules()
	})
}

// TestLoadIterCloses: the stream is closed once, whether it parses or
// not, and a corrupt one gives the parser's error.
func TestLoadIterCloses(t *testing.T) {
	text, err := os.ReadFile("../testdata/kallsyms.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, data, wantErr string
	}{
		{"records", string(symtest.KallsymsRecords(t, text)), ""},
		{"corrupt", "garbage, not records", "malformed header"},
	} {
		s := &symtest.FakeStream{Reader: strings.NewReader(tt.data)}
		k, err := loadIter(func() (io.ReadCloser, error) { return s, nil })
		if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%s: loadIter = %v, %v; want error %q", tt.name, k, err, tt.wantErr)
		}
		if s.Closed != 1 {
			t.Errorf("%s: stream closed %d times, want once", tt.name, s.Closed)
		}
	}
	if _, err := loadIter(func() (io.ReadCloser, error) { return nil, errors.New("no BTF") }); err == nil || err.Error() != "no BTF" {
		t.Errorf("loadIter(open fails) error = %v, want the open's", err)
	}
}
