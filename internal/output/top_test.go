package output

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestWriteTopGolden(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteTop(&buf, newFixture().aggregate(), 0); err != nil {
		t.Fatal(err)
	}
	golden(t, "fixture.top", buf.Bytes())
}

func TestTopEntries(t *testing.T) {
	entries, total := topEntries(newFixture().aggregate())
	if total != 20 {
		t.Errorf("total %d, want 20", total)
	}
	got := map[string][2]int64{}
	for _, e := range entries {
		got[e.name] = [2]int64{e.flat, e.cum}
	}
	for name, want := range map[string][2]int64{
		"vfs_write_[k]":          {6, 6},
		"square":                 {5, 5},
		"scale":                  {0, 5},
		"fact":                   {0, 5}, // recursive: counted once per sample
		"main":                   {0, 12},
		"__libc_start_call_main": {0, 15},
		"[unknown]_[k]":          {1, 1},
		"[vdso+0x9d0]":           {1, 1},
		"[unknown]":              {0, 1},
		"odd:name?":              {0, 5},
	} {
		if got[name] != want {
			t.Errorf("%s: flat, cum = %v, want %v", name, got[name], want)
		}
	}
	for i := 1; i < len(entries); i++ {
		if a, b := entries[i-1], entries[i]; a.flat < b.flat || (a.flat == b.flat && a.cum < b.cum) {
			t.Errorf("entries %d and %d out of order: %+v, %+v", i-1, i, a, b)
		}
	}
}

func TestWriteTopLimit(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteTop(&buf, newFixture().aggregate(), 2); err != nil {
		t.Fatal(err)
	}
	want := `Total: 20 samples
flat   flat%    sum%  cum    cum%  function
   6  30.00%  30.00%    6  30.00%  vfs_write_[k]
   5  25.00%  55.00%    5  25.00%  square
(23 more functions not shown)
`
	if buf.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", buf.String(), want)
	}

	buf.Reset()
	if err := WriteTop(&buf, NewAggregator(), 5); err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); got != "Total: 0 samples\n" {
		t.Errorf("empty profile: %q", got)
	}

	err := WriteTop(failWriter{errors.New("disk full")}, newFixture().aggregate(), 5)
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("got error %v", err)
	}
}
