// Command gochain is a small Go program built at test time so the
// unwinder's reading of Go's .debug_frame can be compared with readelf.
package main

import "fmt"

//go:noinline
func leaf(n int) int { return n*31 + 7 }

//go:noinline
func middle(n int) int {
	s := 0
	for i := range n {
		s ^= leaf(i)
	}
	return s
}

func main() { fmt.Println(middle(1000)) }
