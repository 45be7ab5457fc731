package attach

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// fakeRing is a ringConsumer over memory of its own: size bytes of data
// mapped "twice" by writing every byte to both halves.
type fakeRing struct {
	rc         *ringConsumer
	cons, prod uint64
	size       uint64
}

func newFakeRing(size uint64) *fakeRing {
	f := &fakeRing{size: size}
	f.rc = &ringConsumer{consPos: &f.cons, prodPos: &f.prod, ring: make([]byte, 2*size), mask: size - 1}
	return f
}

// write appends a record of data with the given header bits (busy,
// discard) at the producer position and advances it.
func (f *fakeRing) write(data []byte, bits uint32) {
	rec := make([]byte, ringHeaderLen+(len(data)+7)&^7)
	binary.NativeEndian.PutUint32(rec, uint32(len(data))|bits)
	copy(rec[ringHeaderLen:], data)
	for i, b := range rec {
		at := (f.prod + uint64(i)) & (f.size - 1)
		f.rc.ring[at], f.rc.ring[at+f.size] = b, b
	}
	f.prod += uint64(len(rec))
}

// read consumes and returns the records' data (copies).
func (f *fakeRing) read() (got [][]byte, n int) {
	n = f.rc.consume(func(b []byte) { got = append(got, slices.Clone(b)) })
	return got, n
}

// TestRingConsume reads records in order, across the end of the ring,
// skips discarded ones, stops at a record still being written and at a
// header longer than what was written, and stores the consumer position
// past what it read.
func TestRingConsume(t *testing.T) {
	f := newFakeRing(256)
	var want [][]byte
	for i := range 40 { // 40 records of 1-24 bytes: several trips around 256 bytes
		rec := make([]byte, 1+i%24)
		for j := range rec {
			rec[j] = byte(i)
		}
		f.write(rec, 0)
		want = append(want, rec)
		if i%3 == 2 {
			got, _ := f.read()
			if !slices.EqualFunc(got, want, slices.Equal) {
				t.Fatalf("after %d records: read %v, want %v", i+1, got, want)
			}
			if f.cons != f.prod {
				t.Fatalf("consumer position %d, producer %d", f.cons, f.prod)
			}
			want = nil
		}
	}
	if got, _ := f.read(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("the last records: read %v, want %v", got, want)
	}
	if f.cons < 3*f.size {
		t.Fatalf("only %d bytes went through a ring of %d", f.cons, f.size)
	}

	f.write([]byte("skip me"), ringDiscardBit)
	f.write([]byte("kept"), 0)
	if got, n := f.read(); n != 2 || len(got) != 1 || string(got[0]) != "kept" {
		t.Errorf("a discarded record then one kept: read %q (%d records), want [kept] (2)", got, n)
	}

	f.write([]byte("first"), 0)
	busyAt := f.prod
	f.write([]byte("being written"), ringBusyBit)
	if got, _ := f.read(); len(got) != 1 || string(got[0]) != "first" || f.cons != busyAt {
		t.Errorf("before a busy record: read %q, consumer at %d; want [first], at %d", got, f.cons, busyAt)
	}
	// Committed: the header loses its busy bit.
	binary.NativeEndian.PutUint32(f.rc.ring[busyAt&(f.size-1):], uint32(len("being written")))
	binary.NativeEndian.PutUint32(f.rc.ring[busyAt&(f.size-1)+f.size:], uint32(len("being written")))
	if got, _ := f.read(); len(got) != 1 || string(got[0]) != "being written" {
		t.Errorf("once committed: read %q", got)
	}

	// A header claiming more than the producer has passed.
	f.write([]byte("whole"), 0)
	f.prod -= 8
	if got, n := f.read(); n != 0 || len(got) != 0 {
		t.Errorf("a record the producer has not passed whole: read %q", got)
	}
}

// TestRingConsumeStores: the consumer position is stored every
// ringStoreEvery records and at the end, never past a record the
// callback has not returned from.
func TestRingConsumeStores(t *testing.T) {
	f := newFakeRing(1 << 12)
	for range ringStoreEvery + 10 {
		f.write([]byte("12345678"), 0)
	}
	start := f.cons
	var seen []uint64
	n := 0
	f.rc.consume(func(b []byte) {
		n++
		seen = append(seen, f.cons)
		if max := start + uint64(n-1)*16; f.cons > max {
			t.Fatalf("record %d: consumer position %d stored past the records returned (%d)", n, f.cons, max)
		}
	})
	if f.cons != f.prod {
		t.Errorf("at the end the consumer is at %d, the producer at %d", f.cons, f.prod)
	}
	if got, want := seen[ringStoreEvery], start+ringStoreEvery*16; got != want {
		t.Errorf("during record %d the stored position is %d, want %d (stored after %d records)", ringStoreEvery+1, got, want, ringStoreEvery)
	}
	if seen[ringStoreEvery-1] != start {
		t.Errorf("the position was stored before %d records", ringStoreEvery)
	}
}

// ringSizedWriter loads a socket filter that writes one record of size
// bytes (a multiple of 8, at most 256), every word of it marker, to rb
// with the given bpf_ringbuf_output flags each time it is test-run.
func ringSizedWriter(t *testing.T, rb *ebpf.Map, size int16, marker, flags int32) *ebpf.Program {
	t.Helper()
	insns := asm.Instructions{asm.Mov.Imm(asm.R1, marker)}
	for off := -size; off < 0; off += 8 {
		insns = append(insns, asm.StoreMem(asm.RFP, off, asm.R1, asm.DWord))
	}
	insns = append(insns,
		asm.LoadMapPtr(asm.R1, rb.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, int32(-size)),
		asm.Mov.Imm(asm.R3, int32(size)),
		asm.Mov.Imm(asm.R4, flags),
		asm.FnRingbufOutput.Call(),
		asm.Mov.Imm(asm.R0, 0),
		asm.Return(),
	)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL", Instructions: insns})
	if err != nil {
		t.Fatalf("load ring buffer writer: %v", err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog
}

// TestRingConsumeKernel reads a real ring buffer that BPF programs write
// records of several sizes to, many times around its 4 KiB, and requires
// every record, in order, with its bytes.
func TestRingConsumeKernel(t *testing.T) {
	rb := testRing(t)
	rc, err := newRingConsumer(rb)
	if err != nil {
		t.Fatalf("newRingConsumer: %v", err)
	}
	defer rc.close()
	sizes := []int16{8, 40, 136, 256}
	progs := make([]*ebpf.Program, len(sizes))
	for i, n := range sizes {
		progs[i] = ringSizedWriter(t, rb, n, int32(1000+i), 0)
	}
	var want, got []int
	total := 0
	for round := range 200 {
		for k := range 1 + round%5 {
			i := (round + k) % len(sizes)
			if _, err := progs[i].Run(&ebpf.RunOptions{Data: make([]byte, 14)}); err != nil {
				t.Fatalf("run writer: %v", err)
			}
			want = append(want, i)
			total += int(sizes[i]) + ringHeaderLen
		}
		rc.consume(func(b []byte) {
			i := slices.Index(sizes, int16(len(b)))
			if i < 0 {
				t.Fatalf("a record of %d bytes", len(b))
			}
			for off := 0; off < len(b); off += 8 {
				if v := binary.NativeEndian.Uint64(b[off:]); v != uint64(1000+i) {
					t.Fatalf("record of %d bytes holds %d at %d, want %d", len(b), v, off, 1000+i)
				}
			}
			got = append(got, i)
		})
		if a := rc.available(); a != 0 {
			t.Fatalf("round %d: %d bytes left unread", round, a)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("read %d records, wrote %d; first difference at %d", len(got), len(want), firstDiff(got, want))
	}
	if total < 16*4096 {
		t.Errorf("only %d bytes went through the ring", total)
	}
}

func firstDiff(a, b []int) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
