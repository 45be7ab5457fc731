package procmaps

import (
	"bytes"
	"fmt"
	"testing"
)

// BenchmarkParse parses a 300-line maps file, as a whole-system profile
// re-reads those of the processes it samples: time, bytes and
// allocations per parse.
func BenchmarkParse(b *testing.B) {
	var buf bytes.Buffer
	for i := range 300 {
		fmt.Fprintf(&buf, "%x-%x r-xp %08x fd:01 %d /usr/lib/x86_64-linux-gnu/lib%d.so.6\n",
			0x7f0000000000+i*0x10000, 0x7f0000000000+i*0x10000+0x8000, i*0x1000, 1000+i/4, i/4)
	}
	data := buf.Bytes()
	b.ReportAllocs()
	for b.Loop() {
		entries, err := Parse(bytes.NewReader(data))
		if err != nil || len(entries) != 300 {
			b.Fatalf("%d entries, %v", len(entries), err)
		}
	}
}
