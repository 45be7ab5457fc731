package ksym

import (
	"testing"

	"github.com/gprofile/gprofile/internal/testutil"
)

// BenchmarkOpenLookup: loading the on-demand kernel symbol lookup
// (bpf/ksymlookup.bpf.c, its batch map and the text range query) and
// closing it, as each gprofile run does once on 5.16+ kernels.
func BenchmarkOpenLookup(b *testing.B) {
	testutil.RequirePrivileges(b)
	for b.Loop() {
		l, err := OpenLookup()
		if err != nil {
			b.Fatal(err)
		}
		if start, end := l.TextRange(); start == 0 || end <= start {
			b.Fatalf("text range %#x-%#x", start, end)
		}
		l.Close()
	}
}
