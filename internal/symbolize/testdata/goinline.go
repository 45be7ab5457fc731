// goinline.go is the Go workload of the DWARF inlining tests: the
// compiler inlines add into sum and sum into work.
package main

import "os"

func add(a, b int) int {
	return a*b + a
}

func sum(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += add(i, n)
	}
	return s
}

//go:noinline
func work(n int) int {
	return sum(n) * 2
}

func main() { os.Exit(work(len(os.Args)) & 1) }
