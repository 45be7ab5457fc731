// Command symbench measures gprofile's symbolizer against addr2line; run.sh
// drives it.
//
//	symbench addr2line -e BIN < ADDRS     like addr2line -a -f -i -e BIN: cold, end to end
//	symbench warm -e BIN < ADDRS          warm lookups/s: names only, and lines+inlines
//	symbench kallsyms [-n N] [-source text|iter]  kernel symbol table load time
//	symbench time -- CMD ARGS... < IN     wall time and peak RSS of CMD (stdout discarded)
//	symbench compare A B                  agreement of two addr2line -a -f -i outputs
//	symbench addrs -e BIN [-n N]          N fixed pseudo-random addresses inside BIN's functions
package main

import (
	"bufio"
	"debug/elf"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gprofile/gprofile/internal/symbolize/kallsyms"
	"github.com/gprofile/gprofile/internal/symbolize/ksym"
	"github.com/gprofile/gprofile/internal/symbolize/objfile"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: symbench addr2line|warm|kallsyms|time|compare|addrs ...")
		os.Exit(2)
	}
	if path := os.Getenv("SYMBENCH_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer pprof.StopCPUProfile()
		}
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "addr2line":
		err = addr2line(args)
	case "warm":
		err = warm(args)
	case "kallsyms":
		err = kallsymsCmd(args)
	case "time":
		err = timeCmd(args)
	case "compare":
		err = compare(args)
	case "addrs":
		err = addrs(args)
	default:
		err = fmt.Errorf("unknown command %q", cmd)
	}
	if err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "symbench:", err)
		os.Exit(1)
	}
}

// readAddrs reads hex addresses, one a line, from r.
func readAddrs(r io.Reader) ([]uint64, error) {
	var out []uint64
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		s := strings.TrimPrefix(strings.TrimSpace(sc.Text()), "0x")
		if s == "" {
			continue
		}
		a, err := strconv.ParseUint(s, 16, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, sc.Err()
}

// addr2line prints, for each address on stdin, what addr2line -a -f -i
// prints: the address, then function and file:line of each inlined
// frame, innermost first, then of the physical function.
func addr2line(args []string) error {
	fs := flag.NewFlagSet("addr2line", flag.ExitOnError)
	bin := fs.String("e", "", "binary")
	fs.Parse(args)
	b, err := objfile.Open(*bin)
	if err != nil {
		return err
	}
	addrs, err := readAddrs(os.Stdin)
	if err != nil {
		return err
	}
	b.Preload(addrs) // reads the units they fall in, on every CPU
	w := bufio.NewWriterSize(os.Stdout, 1<<16)
	defer w.Flush()
	for _, a := range addrs {
		fmt.Fprintf(w, "0x%016x\n", a)
		lines := b.Lines(a)
		if len(lines) == 0 {
			name := "??"
			if sym, ok := b.Lookup(a); ok {
				name = sym.Function
			}
			fmt.Fprintf(w, "%s\n??:0\n", name)
			continue
		}
		for i, l := range lines {
			name := l.Function
			if i == len(lines)-1 {
				// The physical frame has the symbol table's name, as
				// gprofile's Frame.Function.
				if sym, ok := b.Lookup(a); ok {
					name = sym.Function
				}
			}
			if name == "" {
				name = "??"
			}
			file := l.File
			if file == "" {
				file = "??"
			}
			fmt.Fprintf(w, "%s\n%s:%d\n", name, file, l.Line)
		}
	}
	return nil
}

// warm measures lookups on warm caches: every address resolved once,
// then as many passes as fit in a second.
func warm(args []string) error {
	fs := flag.NewFlagSet("warm", flag.ExitOnError)
	bin := fs.String("e", "", "binary")
	fs.Parse(args)
	addrs, err := readAddrs(os.Stdin)
	if err != nil {
		return err
	}
	b, err := objfile.Open(*bin)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		b.Lookup(a)
		b.Lines(a)
	}
	// Rates are per second of CPU time (user + system) of this process,
	// not of wall time, so that other load on the machine counts less.
	rate := func(fn func(uint64)) float64 {
		n := 0
		start, cpu0 := time.Now(), cpuTime()
		for time.Since(start) < time.Second {
			for _, a := range addrs {
				fn(a)
			}
			n += len(addrs)
		}
		return float64(n) / (cpuTime() - cpu0).Seconds()
	}
	names := rate(func(a uint64) { b.Lookup(a) })
	lines := rate(func(a uint64) { b.Lookup(a); b.Lines(a) })
	fmt.Printf("names %.0f\nlines %.0f\n", names, lines)
	return nil
}

// cpuTime returns the user and system CPU time of this process.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// kallsyms times the kernel symbol table's load n times from one source
// and prints the fastest and the median in ms, with the symbols kept:
//
//	-source text  kallsyms.Load("/proc/kallsyms") (load_*), and reading the
//	              file alone in 64 KiB reads (read_*)
//	-source iter  ksym.OpenIter + ksym.ParseIter (load_*)
//	              with kernel BTF decoded (warm), after a first load that
//	              decodes it (cold_load; run a fresh symbench for each
//	              cold sample); the open alone: load, verify and attach
//	              the program (open_*); and opening and reading the
//	              stream alone (read_*)
func kallsymsCmd(args []string) error {
	fs := flag.NewFlagSet("kallsyms", flag.ExitOnError)
	n := fs.Int("n", 10, "repetitions")
	source := fs.String("source", "text", "text (/proc/kallsyms) or iter (the BPF kallsyms iterator)")
	fs.Parse(args)
	var load func() (*kallsyms.Table, error)
	var read, open func() error
	switch *source {
	case "text":
		load = func() (*kallsyms.Table, error) { return kallsyms.Load("/proc/kallsyms") }
		read = func() error { return drain(os.Open("/proc/kallsyms")) }
	case "iter":
		load = func() (*kallsyms.Table, error) {
			r, err := ksym.OpenIter()
			if err != nil {
				return nil, err
			}
			defer r.Close()
			return ksym.ParseIter(r)
		}
		read = func() error { return drain(ksym.OpenIter()) }
		open = func() error {
			r, err := ksym.OpenIter()
			if err == nil {
				r.Close()
			}
			return err
		}
	default:
		return fmt.Errorf("kallsyms: -source %q: want text or iter", *source)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	if *source == "iter" {
		// The first load decodes kernel BTF into the held cache (cold),
		// the others reuse it (warm).
		defer ksym.HoldKernelBTF()()
		start := time.Now()
		if _, err := load(); err != nil {
			return err
		}
		fmt.Printf("cold_load %.1f\n", ms(time.Since(start)))
	}
	var loads, reads, opens []time.Duration
	var symbols int
	for i := 0; i < *n; i++ {
		start := time.Now()
		k, err := load()
		if err != nil {
			return err
		}
		loads = append(loads, time.Since(start))
		symbols = k.Len()
		start = time.Now()
		if err := read(); err != nil {
			return err
		}
		reads = append(reads, time.Since(start))
		if open != nil {
			start = time.Now()
			if err := open(); err != nil {
				return err
			}
			opens = append(opens, time.Since(start))
		}
	}
	stat := func(name string, ds []time.Duration) {
		if len(ds) > 0 {
			slices.Sort(ds)
			fmt.Printf("%s_min %.1f\n%s_median %.1f\n", name, ms(ds[0]), name, ms(ds[len(ds)/2]))
		}
	}
	stat("load", loads)
	stat("read", reads)
	stat("open", opens)
	fmt.Printf("symbols %d\n", symbols)
	return nil
}

// drain reads r, as opened, to its end in 64 KiB reads and closes it.
func drain[R io.ReadCloser](r R, err error) error {
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = io.Copy(io.Discard, bufio.NewReaderSize(r, 1<<16))
	return err
}

// timeCmd runs a command with stdin passed on and stdout written to
// the file named by $SYMBENCH_OUT (or discarded), and prints its wall
// time (s) and peak RSS (KiB).
func timeCmd(args []string) error {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin = os.Stdin
	cmd.Stderr = os.Stderr
	if out := os.Getenv("SYMBENCH_OUT"); out != "" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		defer f.Close()
		cmd.Stdout = f
	}
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return err
	}
	wall := time.Since(start)
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	fmt.Printf("wall %.3f\ncpu %.3f\nrss %d\n", wall.Seconds(), cpu.Seconds(), ru.Maxrss)
	return nil
}

// entry is one address of an addr2line -a -f -i output.
type entry struct{ names, lines []string }

var discriminator = regexp.MustCompile(` \(discriminator \d+\)$`)

// cloneSuffix matches GCC's suffixes of cloned functions, which the
// symbol table has and DWARF has not.
var cloneSuffix = regexp.MustCompile(`(\.(constprop|isra|part|cold|lto_priv)\.?\d*)+$`)

// parseA2L parses addr2line -a -f -i output into entries by address.
func parseA2L(path string) (map[string]entry, []string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	out := map[string]entry{}
	var order []string
	var cur string
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "0x") {
			a, _ := strconv.ParseUint(l[2:], 16, 64)
			cur = fmt.Sprintf("%x", a)
			order = append(order, cur)
			out[cur] = entry{}
			continue
		}
		if i+1 >= len(lines) {
			break
		}
		e := out[cur]
		e.names = append(e.names, cloneSuffix.ReplaceAllString(l, ""))
		fl := discriminator.ReplaceAllString(lines[i+1], "")
		if j := strings.LastIndexByte(fl, ':'); j >= 0 {
			fl = filepath.Base(fl[:j]) + fl[j:]
		}
		e.lines = append(e.lines, fl)
		out[cur] = e
		i++
	}
	return out, order, nil
}

// compare prints how many addresses of A have the same function names
// (all frames, innermost first) and the same file base names and lines
// in B.
func compare(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("compare A B")
	}
	a, order, err := parseA2L(args[0])
	if err != nil {
		return err
	}
	b, _, err := parseA2L(args[1])
	if err != nil {
		return err
	}
	names, lines, shown := 0, 0, 0
	for _, addr := range order {
		ea, eb := a[addr], b[addr]
		okN := slices.Equal(ea.names, eb.names)
		okL := slices.Equal(ea.lines, eb.lines)
		if okN {
			names++
		}
		if okL {
			lines++
		}
		if (!okN || !okL) && shown < 5 && os.Getenv("SYMBENCH_VERBOSE") != "" {
			shown++
			fmt.Fprintf(os.Stderr, "%s:\n  %v %v\n  %v %v\n", addr, ea.names, ea.lines, eb.names, eb.lines)
		}
	}
	n := float64(len(order))
	fmt.Printf("addresses %d\nnames %.2f\nlines %.2f\n", len(order), 100*float64(names)/n, 100*float64(lines)/n)
	return nil
}

// addrs prints n pseudo-random addresses (fixed seed) inside the sized
// function symbols of a binary, the same on every run.
func addrs(args []string) error {
	fs := flag.NewFlagSet("addrs", flag.ExitOnError)
	bin := fs.String("e", "", "binary")
	n := fs.Int("n", 10000, "addresses")
	fs.Parse(args)
	f, err := elf.Open(*bin)
	if err != nil {
		return err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return err
	}
	var funcs []elf.Symbol
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size > 0 && s.Value != 0 {
			funcs = append(funcs, s)
		}
	}
	slices.SortFunc(funcs, func(a, b elf.Symbol) int { return int(a.Value - b.Value) })
	if len(funcs) == 0 {
		return fmt.Errorf("%s has no sized functions", *bin)
	}
	r := rand.New(rand.NewPCG(1, 2))
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	for i := 0; i < *n; i++ {
		s := funcs[r.IntN(len(funcs))]
		fmt.Fprintf(w, "0x%x\n", s.Value+r.Uint64N(s.Size))
	}
	return nil
}
