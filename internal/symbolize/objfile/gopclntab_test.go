package objfile

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/debuginfo"
	"github.com/gprofile/gprofile/internal/symbolize/gopclntab"
	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
)

// TestGoInlineFallback checks that a Go binary whose moduledata (so
// go:func.*) cannot be found gets its lines from DWARF, or without DWARF
// from gosym (gopclntab.GosymLines), and that the normal build uses the decoder.
func TestGoInlineFallback(t *testing.T) {
	for _, tc := range []struct {
		name   string
		flags  []string
		broken bool
		want   string
	}{
		{"normal", nil, false, "*gopclntab.InlineLines"},
		{"normal-no-moduledata", nil, true, "*dwarfline.Table"},
		{"stripped-no-moduledata", []string{"-ldflags=-s -w"}, true, "gopclntab.GosymLines"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := symtest.GoinlineBinary(t, tc.flags...)
			if tc.broken {
				symtest.BreakModuledata(t, raw)
			}
			b, err := Load(bytes.NewReader(raw), debuginfo.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprintf("%T", b.lines); got != tc.want {
				t.Fatalf("line source %s, want %s", got, tc.want)
			}
			sym, ok := symtest.GoFuncEntry(t, raw, "main.work")
			if !ok {
				t.Fatal("no main.work")
			}
			if ls := b.Lines(sym); len(ls) == 0 || ls[len(ls)-1].Function != "main.work" {
				t.Errorf("Lines(main.work) = %v", ls)
			}
		})
	}
}

// TestGoMappedTruncated loads a Go binary from its file, so that its
// .gopclntab is mapped (elfio.MapSection), not copied: lines come from
// the mapping, for the line decoder and for gosym's (a stripped build);
// then the file is truncated under the mapping, and a lookup that reads
// the lost pages gives no lines instead of killing the process (SIGBUS).
func TestGoMappedTruncated(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
		want  string
	}{
		{"inline", nil, "*gopclntab.InlineLines"},
		{"gosym", []string{"-ldflags=-s -w"}, "gopclntab.GosymLines"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := symtest.GoinlineBinary(t, tc.flags...)
			if tc.want == "gopclntab.GosymLines" {
				symtest.BreakModuledata(t, raw)
			}
			path := filepath.Join(t.TempDir(), "goinline")
			if err := os.WriteFile(path, raw, 0o755); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			b, err := Load(f, debuginfo.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprintf("%T", b.lines); got != tc.want {
				t.Fatalf("line source %s, want %s", got, tc.want)
			}
			mapped := false
			switch l := b.lines.(type) {
			case *gopclntab.InlineLines:
				mapped = gopclntab.Mapped(l)
			case gopclntab.GosymLines:
				mapped = l.Keep != nil
			}
			if !mapped {
				t.Fatal(".gopclntab was copied, not mapped")
			}
			sym, ok := symtest.GoFuncEntry(t, raw, "main.work")
			if !ok {
				t.Fatal("no main.work")
			}
			if ls := b.Lines(sym); len(ls) == 0 || ls[len(ls)-1].Function != "main.work" {
				t.Fatalf("Lines(main.work) = %v", ls)
			}
			if err := os.Truncate(path, 4096); err != nil {
				t.Fatal(err)
			}
			// Every page past the first is gone now: no line read from
			// them, and no crash (gosym recovers the fault itself and
			// gives the function it parsed before, without a line).
			for _, l := range b.Lines(sym) {
				if l.Line > 0 || l.File != "" {
					t.Errorf("Lines(main.work) after truncation gave %+v", l)
				}
			}
		})
	}
}
