// Command gostack captures, in a hot leaf of a goroutine, its registers
// and a copy of its stack from sp up to the goroutine's stack top, and
// writes them with /proc/self/maps to a file in the format of
// ../stackdump.c, so the unwinder's Go path is tested offline. Usage:
// gostack OUTFILE. Built at test time (see gostack_test.go).
package main

import (
	"encoding/binary"
	"fmt"
	"os"
)

// capture stores the caller's pc (its return address), sp (after the
// return) and rbp into regs (DWARF numbering) and copies the stack from
// that sp up to the goroutine's stack top (at most max bytes) into dst,
// without growing the stack; it returns the bytes copied.
func capture(regs *[17]uint64, dst *byte, max uintptr) uintptr

var (
	regs   [17]uint64
	buf    [1 << 20]byte
	copied uintptr
)

//go:noinline
func leaf(x int) int {
	copied = capture(&regs, &buf[0], uintptr(len(buf)))
	return x + 1
}

//go:noinline
func middle(d, x int) int {
	if d == 0 {
		return leaf(x) + 1
	}
	return middle(d-1, x+d) + 1
}

//go:noinline
func entry(done chan int) {
	done <- middle(20, 1)
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gostack OUTFILE")
		os.Exit(2)
	}
	done := make(chan int)
	go entry(done)
	<-done
	if copied == 0 || copied%8 != 0 {
		fmt.Fprintf(os.Stderr, "captured %d bytes\n", copied)
		os.Exit(1)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out := []byte("STKDUMP1")
	for _, r := range regs {
		out = binary.LittleEndian.AppendUint64(out, r)
	}
	out = binary.LittleEndian.AppendUint64(out, uint64(copied))
	out = append(append(out, buf[:copied]...), maps...)
	if err := os.WriteFile(os.Args[1], out, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
