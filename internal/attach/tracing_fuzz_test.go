package attach

import (
	"fmt"
	"strings"
	"testing"
)

// FuzzFormatField: formatField never panics on any format text, and finds
// a field declared on the format's first line with its offset and size,
// whatever text follows.
func FuzzFormatField(f *testing.F) {
	f.Add("u64", "clone_flags", uint16(32), uint16(8), "\tfield:pid_t pid;\toffset:8;\tsize:4;\tsigned:1;\n")
	f.Add("char", "comm[16]", uint16(12), uint16(16), "print fmt: \"pid=%d\"")
	f.Add("const char *", "name", uint16(0), uint16(8), "")
	f.Fuzz(func(t *testing.T, typ, decl string, offset, size uint16, rest string) {
		formatField(rest, decl) // any text: no panic
		name, _, _ := strings.Cut(decl, "[")
		if !cIdent(name) || strings.ContainsAny(typ, ";:\n\r") || strings.TrimSpace(typ) == "" ||
			strings.ContainsAny(decl[len(name):], ";:\n\r *") {
			return
		}
		format := fmt.Sprintf("\tfield:%s %s;\toffset:%d;\tsize:%d;\tsigned:0;\n%s", typ, decl, offset, size, rest)
		got, ok := formatField(format, name)
		if want := (traceField{name, int(offset), int(size)}); !ok || got != want {
			t.Fatalf("formatField(%q, %q) = %+v, %v; want %+v", format, name, got, ok, want)
		}
	})
}

// cIdent reports whether s is a C identifier.
func cIdent(s string) bool {
	for i, r := range s {
		if !(r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || i > 0 && '0' <= r && r <= '9') {
			return false
		}
	}
	return s != ""
}
