package objfile

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/debuginfo"
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
