package recorder

import (
	"encoding/binary"
	"os"
	"reflect"
	"testing"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/symbolize"
)

// BenchmarkHotPath is the per-sample path of a run once caches are warm:
// a ring buffer record is decoded (attach), its stack is found in the
// collector's memo (symbolized once, on the first pass), and the sample is
// aggregated. The stack is a real one of this process: 24 user frames in
// the test binary's own functions, 4 kernel frames.
func BenchmarkHotPath(b *testing.B) {
	sym, err := symbolize.New(symbolize.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer sym.Close()
	c := newCollector(sym, nil, false, nil)
	pcs := []uint64{
		uint64(reflect.ValueOf(BenchmarkHotPath).Pointer()),
		uint64(reflect.ValueOf(newCollector).Pointer()),
		uint64(reflect.ValueOf(trimJunk).Pointer()),
	}
	var user []uint64
	for i := 0; len(user) < 24; i++ {
		user = append(user, pcs[i%len(pcs)]+uint64(i))
	}
	raw := benchRecord(uint32(os.Getpid()), []uint64{0xffffffff81000010, 0xffffffff81000020, 0xffffffff81000030, 0xffffffff81000040}, user)
	var smp attach.Sample
	b.ReportAllocs()
	for b.Loop() {
		if err := attach.DecodeRecord(raw, &smp); err != nil {
			b.Fatal(err)
		}
		c.add(&smp)
	}
}

// BenchmarkNewLeaf is the path of a raw stack new to its process whose
// callers are not: a new leaf address under a known 24-frame user stack
// and 4 kernel frames, as unwound stacks (which the location memo
// serves). The leaf runs through 4096 addresses of the test binary's
// code, which the symbolizer's address cache holds after the first
// round; each round starts a new collector, so that every stack is new,
// and gives it the callers first, untimed.
func BenchmarkNewLeaf(b *testing.B) {
	user := append([]uint64{0}, benchCallers(24)...)
	benchNewAddress(b, user, 0, uint64(reflect.ValueOf(symbolize.New).Pointer()))
}

// BenchmarkNewCaller is BenchmarkNewLeaf with the new address a return
// address amid the 24 known callers (a code path new below a known
// leaf and above a known root), which fromLocations names alone too.
func BenchmarkNewCaller(b *testing.B) {
	benchNewAddress(b, benchCallers(25), 12, uint64(reflect.ValueOf(symbolize.New).Pointer())+1)
}

// benchCallers returns n user addresses in three functions of the test
// binary, each a little further in than the one before.
func benchCallers(n int) []uint64 {
	pcs := []uint64{
		uint64(reflect.ValueOf(BenchmarkHotPath).Pointer()),
		uint64(reflect.ValueOf(newCollector).Pointer()),
		uint64(reflect.ValueOf(trimJunk).Pointer()),
	}
	user := make([]uint64, n)
	for i := range user {
		user[i] = pcs[i%len(pcs)] + uint64(i)
	}
	return user
}

// benchNewAddress runs BenchmarkNewLeaf's loop on the unwound user stack
// user (4 known kernel frames above it), its address at index at taking
// base, base+1, … base+4095 in turn: each round of 4096 starts a new
// collector and gives it the rest of the stack first (at base+4096),
// untimed.
func benchNewAddress(b *testing.B, user []uint64, at int, base uint64) {
	sym, err := symbolize.New(symbolize.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer sym.Close()
	smp := attach.Sample{PID: uint32(os.Getpid()), TID: uint32(os.Getpid()), Period: 1, Comm: []byte("bench"),
		Flags: attach.FlagUserRegs, KernelIPs: []uint64{0xffffffff81000010, 0xffffffff81000020, 0xffffffff81000030, 0xffffffff81000040},
		UserIPs: user}
	const round = 4096
	var c *collector
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%round == 0 {
			b.StopTimer()
			c = newCollector(sym, nil, false, nil)
			user[at] = base + round // the rest, symbolized once
			c.add(&smp)
			b.StartTimer()
		}
		user[at] = base + uint64(i%round)
		c.add(&smp)
	}
	if c.samples == 0 || c.byAddr == 0 {
		b.Fatalf("%d samples, %d stacks from the location memo", c.samples, c.byAddr)
	}
}

// benchRecord builds a ring buffer record in the layout of struct sample
// (bpf/profile.bpf.c).
func benchRecord(pid uint32, kernel, user []uint64) []byte {
	ne := binary.NativeEndian
	const offIPs = attach.RecordHeaderBytes // no stack window (frame-pointer mode), then the IPs
	raw := make([]byte, offIPs+8*(len(kernel)+len(user)))
	ne.PutUint64(raw[0:], 1)       // time_ns
	ne.PutUint64(raw[8:], 1000000) // period
	ne.PutUint32(raw[24:], pid)
	ne.PutUint32(raw[28:], pid)
	ne.PutUint32(raw[40:], uint32(8*len(kernel)))
	ne.PutUint32(raw[44:], uint32(8*len(user)))
	copy(raw[48:64], "bench")
	for i, ip := range append(append([]uint64{}, kernel...), user...) {
		ne.PutUint64(raw[offIPs+8*i:], ip)
	}
	return raw
}

// TestBenchRecord: the record BenchmarkHotPath decodes is in the layout
// attach.DecodeRecord reads (a benchmark that fails to decode is only
// seen when benchmarks run).
func TestBenchRecord(t *testing.T) {
	var s attach.Sample
	raw := benchRecord(7, []uint64{0xffffffff81000010}, []uint64{0x401000, 0x401100})
	if err := attach.DecodeRecord(raw, &s); err != nil {
		t.Fatal(err)
	}
	if s.PID != 7 || s.TID != 7 || string(s.Comm) != "bench" || len(s.KernelIPs) != 1 || len(s.UserIPs) != 2 || s.UserIPs[1] != 0x401100 {
		t.Errorf("decoded %+v", s)
	}
}
