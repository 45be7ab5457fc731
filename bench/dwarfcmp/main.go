// Command dwarfcmp compares gprofile's whole user stacks with perf's
// `perf record --call-graph dwarf` side by side, workload by workload: it
// builds the whole-stack workloads of cmd/gprofile/testdata (without
// frame pointers, as distributions build), profiles each for a few
// seconds at 999 Hz with gprofile -E (and any extra gprofile flags) and
// with perf record --call-graph dwarf + perf script, and prints a
// markdown table of the share of each workload's samples (those in its
// hot function) that hold the whole expected chain, in order.
//
// Run as root from the repository root (scripts/compare-dwarf.sh does):
//
//	go run ./bench/dwarfcmp -gprofile bin/gprofile [-secs 3] [-- extra gprofile flags]
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// workload is one program to profile and the chain its samples must hold.
type workload struct {
	name   string
	build  []string // command that builds OUT (replaced by the binary's path)
	run    []string // command line (BIN is the binary), run for SECS seconds
	anchor string   // only samples holding this frame count
	chain  []string // root first
}

func workloads(src string) []workload {
	d := filepath.Join(src, "testdata/dwarf") + "/"
	s := filepath.Join(src, "testdata/sym") + "/"
	rec := []string{"main"}
	for range 300 {
		rec = append(rec, "recurse")
	}
	return []workload{
		{"c_nofp", []string{"gcc", "-O2", "-g", "-fomit-frame-pointer", "-o", "OUT", filepath.Join(src, "testdata/chain.c")}, []string{"BIN", "SECS"}, "chain_c", []string{"main", "chain_a", "chain_b", "chain_c"}},
		{"cxx_nofp", []string{"g++", "-O2", "-g", "-fomit-frame-pointer", "-o", "OUT", d + "chain.cpp"}, []string{"BIN", "SECS"}, "chain::c", []string{"main", "chain::a", "chain::b", "chain::c"}},
		{"rust_nofp", []string{"rustc", "-O", "-g", "-C", "force-frame-pointers=no", "--crate-name", "chainrs", "-o", "OUT", d + "chain.rs"}, []string{"BIN", "SECS"}, "chainrs::chain_c", []string{"main", "chainrs::chain_a", "chainrs::chain_b", "chainrs::chain_c"}},
		{"leaf_fp", []string{"gcc", "-O2", "-g", "-fno-omit-frame-pointer", "-momit-leaf-frame-pointer", "-o", "OUT", d + "leaf.c"}, []string{"BIN", "SECS"}, "chain_c", []string{"main", "chain_a", "chain_b", "chain_c"}},
		{"go_leaf", []string{"go", "build", "-o", "OUT", d + "goleaf.go"}, []string{"BIN", "SECS"}, "main.leaf", []string{"main.main", "main.outer", "main.middle", "main.leaf"}},
		{"qsort", []string{"gcc", "-O2", "-g", "-fomit-frame-pointer", "-o", "OUT", d + "qsort.c"}, []string{"BIN", "SECS"}, "cmp_slow", []string{"main", "sort_loop", "cmp_slow"}},
		{"signal", []string{"gcc", "-O2", "-g", "-fomit-frame-pointer", "-o", "OUT", d + "signal.c"}, []string{"BIN", "SECS"}, "sig_spin", []string{"main", "chain_a", "chain_b", "on_signal", "sig_spin"}},
		{"recurse300", []string{"gcc", "-O2", "-g", "-fomit-frame-pointer", "-o", "OUT", d + "recurse.c"}, []string{"BIN", "SECS"}, "rec_leaf", append(rec, "rec_leaf")},
		{"thread", []string{"gcc", "-O2", "-g", "-fomit-frame-pointer", "-pthread", "-o", "OUT", d + "thread.c"}, []string{"BIN", "SECS"}, "thr_spin", []string{"clone3", "start_thread", "thr_mid", "thr_spin"}},
		{"go", []string{"go", "build", "-o", "OUT", s + "gowork.go"}, []string{"BIN", "SECS"}, "main.goSpin", []string{"main.main", "main.goOuter", "main.goMid", "main.goSpin"}},
	}
}

func main() {
	gp := flag.String("gprofile", "bin/gprofile", "gprofile binary")
	perf := flag.String("perf", "perf", "perf binary")
	secs := flag.String("secs", "3", "seconds each workload runs")
	src := flag.String("src", "cmd/gprofile", "directory holding testdata/")
	flag.Parse()
	extra := flag.Args()
	dir, err := os.MkdirTemp("", "dwarfcmp")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(dir)
	fmt.Printf("| workload | chain | gprofile %s | perf --call-graph dwarf |\n|---|---|---|---|\n", strings.Join(extra, " "))
	for _, w := range workloads(*src) {
		bin := filepath.Join(dir, w.name)
		if out, err := exec.Command(w.build[0], subst(w.build[1:], bin, "")...).CombinedOutput(); err != nil {
			fmt.Printf("| %s | build failed: %v %s | | |\n", w.name, err, firstLine(out))
			continue
		}
		argv := subst(w.run, bin, *secs)
		out := filepath.Join(dir, "g.folded") // stdout is the workload's
		gArgs := append(append([]string{"-E", "-o", out, "-f", "999", "-q"}, extra...), "--")
		g := "error: "
		if msg, err := exec.Command(*gp, append(gArgs, argv...)...).CombinedOutput(); err != nil {
			g += fmt.Sprint(err) + " " + firstLine(msg)
		} else if folded, err := os.ReadFile(out); err != nil {
			g += err.Error()
		} else {
			g = score(foldedStacks(folded, filepath.Base(bin)), w)
		}
		p := perfScore(*perf, dir, argv, filepath.Base(bin), w)
		fmt.Printf("| %s | %s | %s | %s |\n", w.name, strings.Join(short(w.chain), ";"), g, p)
	}
}

// short abbreviates a long chain (the recursion) for the table.
func short(chain []string) []string {
	if len(chain) <= 6 {
		return chain
	}
	return []string{chain[0], chain[1], fmt.Sprintf("…(%d)", len(chain)-3), chain[len(chain)-1]}
}

func subst(args []string, bin, secs string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		switch a {
		case "OUT", "BIN":
			a = bin
		case "SECS":
			a = secs
		}
		out[i] = a
	}
	return out
}

// stack is one sample's frames, root first, with a count.
type stack struct {
	frames []string
	count  int
}

// foldedStacks parses gprofile -E lines of comm (frames root first).
func foldedStacks(b []byte, comm string) []stack {
	var out []stack
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		frames := strings.Split(line[:i], ";")
		if frames[0] != comm {
			continue
		}
		var n int
		fmt.Sscan(line[i+1:], &n)
		out = append(out, stack{frames[1:], n})
	}
	return out
}

// perfScore records argv with perf --call-graph dwarf and scores it.
func perfScore(perf, dir string, argv []string, comm string, w workload) string {
	data := filepath.Join(dir, "perf.data")
	rec := append([]string{"record", "-q", "-e", "cpu-clock", "-F", "999", "--call-graph", "dwarf", "-o", data, "--"}, argv...)
	if out, err := exec.Command(perf, rec...).CombinedOutput(); err != nil {
		return fmt.Sprintf("error: %v %s", err, firstLine(out))
	}
	out, err := exec.Command(perf, "script", "-i", data, "-F", "comm,ip,sym").Output()
	if err != nil {
		return fmt.Sprintf("error: perf script: %v", err)
	}
	return score(perfStacks(out, comm), w)
}

// perfStacks parses perf script output: a header line per sample, then
// one frame per line, leaf first, then a blank line.
func perfStacks(b []byte, comm string) []stack {
	var out []stack
	var cur []string
	keep := false
	flush := func() {
		if keep {
			slices.Reverse(cur)
			out = append(out, stack{cur, 1})
		}
		cur, keep = nil, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case !strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, " "):
			flush()
			keep = strings.HasPrefix(line, comm)
		default:
			f := strings.Fields(line)
			if len(f) >= 2 {
				sym := f[1]
				if j := strings.IndexByte(sym, '+'); j > 0 {
					sym = sym[:j]
				}
				cur = append(cur, sym)
			}
		}
	}
	flush()
	return out
}

// score returns "P % (n of N)": the share of samples holding w.anchor
// that hold w.chain in order. Names compare without C++ parameter lists.
func score(stacks []stack, w workload) string {
	total, chained := 0, 0
	for _, s := range stacks {
		frames := make([]string, len(s.frames))
		for i, f := range s.frames {
			if j := strings.IndexByte(f, '('); j > 0 {
				f = f[:j]
			}
			frames[i] = f
		}
		if !slices.Contains(frames, w.anchor) {
			continue
		}
		total += s.count
		if hasChain(frames, w.chain) {
			chained += s.count
		}
	}
	if total == 0 {
		return "no sample in " + w.anchor
	}
	return fmt.Sprintf("%.1f %% (%d of %d)", 100*float64(chained)/float64(total), chained, total)
}

func hasChain(frames, want []string) bool {
	i := 0
	for _, f := range frames {
		if i < len(want) && f == want[i] {
			i++
		}
	}
	return i == len(want)
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "dwarfcmp:", err)
	os.Exit(1)
}
