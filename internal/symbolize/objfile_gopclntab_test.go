package symbolize

import (
	"bytes"
	"fmt"
	"testing"
)

// TestGoInlineFallback checks that a Go binary whose moduledata (so
// go:func.*) cannot be found gets its lines from DWARF, or without DWARF
// from gosym (goLines), and that the normal build uses the decoder.
func TestGoInlineFallback(t *testing.T) {
	for _, tc := range []struct {
		name   string
		flags  []string
		broken bool
		want   string
	}{
		{"normal", nil, false, "*symbolize.goInlineLines"},
		{"normal-no-moduledata", nil, true, "*symbolize.dwarfLines"},
		{"stripped-no-moduledata", []string{"-ldflags=-s -w"}, true, "symbolize.goLines"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := goinlineBinary(t, tc.flags...)
			if tc.broken {
				breakModuledata(t, raw)
			}
			b, err := LoadBinary(bytes.NewReader(raw), LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprintf("%T", b.lines); got != tc.want {
				t.Fatalf("line source %s, want %s", got, tc.want)
			}
			sym, ok := goFuncEntry(t, raw, "main.work")
			if !ok {
				t.Fatal("no main.work")
			}
			if ls := b.Lines(sym); len(ls) == 0 || ls[len(ls)-1].Function != "main.work" {
				t.Errorf("Lines(main.work) = %v", ls)
			}
		})
	}
}
