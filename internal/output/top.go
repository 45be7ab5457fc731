package output

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
)

// topEntry is one function of the top table.
type topEntry struct {
	name      string
	flat, cum int64
}

// WriteTop writes a table of the n functions with the most samples of
// their own (flat: the function is the leaf frame), like go tool pprof
// -top but compact:
//
//	Total: 20 samples
//	flat   flat%    sum%  cum    cum%  function
//	   6  30.00%  30.00%    6  30.00%  vfs_write_[k]
//	   5  25.00%  55.00%    5  25.00%  square
//	   0   0.00% 100.00%   15  75.00%  __libc_start_call_main
//
// cum counts the samples whose stack holds the function anywhere, once per
// sample even when it recurses; sum% is the running total of flat%.
// Functions are told apart by the name FoldedName gives them (so kernel
// functions end in "_[k]", unnamed frames are "[libfoo.so+0x1a2b]", and
// inlined frames count as functions of their own, as in pprof), merged
// across processes. Rows are sorted by flat, then cum (both descending),
// then name. n <= 0 writes every function; a last line says how many were
// left out. Counts are Sample.Count, or the column SetDisplayColumn chose
// (named in the Total line). Writes to w are buffered; the error is
// the first one w returned.
func WriteTop(w io.Writer, a *Aggregator, n int) error {
	entries, total := topEntries(a)
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "Total: %d %s\n", total, a.displayUnit())
	if len(entries) > 0 {
		shown := entries
		if n > 0 && n < len(entries) {
			shown = entries[:n]
		}
		width := max(len("flat"), len(fmt.Sprint(total)))
		fmt.Fprintf(bw, "%*s %7s %7s %*s %7s  %s\n", width, "flat", "flat%", "sum%", width, "cum", "cum%", "function")
		var sum int64
		for _, e := range shown {
			sum += e.flat
			fmt.Fprintf(bw, "%*d %7s %7s %*d %7s  %s\n", width, e.flat, percent(e.flat, total),
				percent(sum, total), width, e.cum, percent(e.cum, total), e.name)
		}
		if left := len(entries) - len(shown); left > 0 {
			fmt.Fprintf(bw, "(%d more functions not shown)\n", left)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write top table: %w", err)
	}
	return nil
}

// topEntries returns the functions of the samples of a, sorted for the
// top table, and the total sample count. Each frame of the Aggregator is
// named once.
func topEntries(a *Aggregator) ([]topEntry, int64) {
	index := make(map[string]int)
	var entries []topEntry
	var total int64
	var name []byte
	entryOf := make([]int32, a.locs.frames.len()) // frame -> its entry + 1; 0 until named
	seen := []int{}                               // entry -> the last sample that counted it in cum, + 1
	sample := 0
	a.eachRecord(func(r *record, i int) {
		v := a.value(r, i, a.display)
		if v == 0 {
			return
		}
		sample++
		total += v
		it := a.frames(r.stack)
		for j := 0; ; j++ {
			c, at := it.nextAt()
			if c == nil {
				break
			}
			k := int(entryOf[at]) - 1
			if k < 0 {
				f := a.frame(c)
				name = appendFoldedName(name[:0], &f, false)
				var ok bool
				if k, ok = index[string(name)]; !ok {
					k = len(entries)
					index[string(name)] = k
					entries = append(entries, topEntry{name: string(name)})
					seen = append(seen, 0)
				}
				entryOf[at] = int32(k + 1)
			}
			if j == 0 {
				entries[k].flat += v
			}
			if seen[k] != sample {
				seen[k] = sample
				entries[k].cum += v
			}
		}
	})
	slices.SortFunc(entries, func(a, b topEntry) int {
		if c := cmp.Compare(b.flat, a.flat); c != 0 {
			return c
		}
		if c := cmp.Compare(b.cum, a.cum); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	return entries, total
}

// percent formats 100*v/total with two decimals and a % sign.
func percent(v, total int64) string {
	if total == 0 {
		return "0.00%"
	}
	return fmt.Sprintf("%.2f%%", 100*float64(v)/float64(total))
}
