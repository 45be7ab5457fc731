package kallsyms

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// kallsymsChunk is the size of the buffers /proc/kallsyms is read into
// (bytes). The kernel returns at most one page per read call whatever the
// buffer (seq_file's buffer is a page), so the size only sets how often
// the reader hands a chunk to the parser, and how long the parse of the
// last chunk, which cannot overlap with any read, takes
// (BenchmarkKallsymsRead, BenchmarkKallsymsParse).
const kallsymsChunk = 64 << 10

// kallsymsBuffers is how many chunks may be in flight (1 MiB): the
// reader only waits for the parser when the parser is that far behind.
const kallsymsBuffers = 16

// loadKallsyms reads /proc/kallsyms text from r in chunk-byte buffers
// and parses each chunk as it arrives (see readChunks). It returns the
// first read or parse error.
func loadKallsyms(r io.Reader, chunk int) (*Table, error) {
	var p *kallsymsParser
	err := readChunks(r, chunk, func(buf []byte) error {
		if p == nil { // a short first chunk is the whole file
			p = newKallsymsParser(kallsymsSizes(buf, len(buf) < chunk))
		}
		return p.feed(buf)
	})
	switch {
	case err != nil:
		return nil, err
	case p == nil:
		return nil, errNoKallsyms
	}
	return p.finish()
}

// readChunks reads r in chunk-byte buffers on a goroutine of its own
// while the calling goroutine hands each buffer, as it arrives, to feed
// (which must not keep it), so that the kernel's side of the read (the
// formatting of /proc/kallsyms, or the BPF iterator's walk) and our parse
// run on two CPUs. It returns the first feed error as it is, or the
// first read error wrapped, always after the reader has stopped (it
// stops at the next chunk once feed fails); io.EOF ends the read without
// an error.
func readChunks(r io.Reader, chunk int, feed func([]byte) error) error {
	free := make(chan []byte, kallsymsBuffers)
	full := make(chan []byte, kallsymsBuffers)
	done := make(chan struct{})
	var readErr error
	go func() {
		// Sends on full never block: at most kallsymsBuffers exist.
		defer close(full)
		for made := 0; ; {
			var buf []byte
			select {
			case <-done:
				return
			case buf = <-free:
			default:
				if made < kallsymsBuffers {
					buf, made = make([]byte, chunk), made+1
				} else {
					select {
					case <-done:
						return
					case buf = <-free:
					}
				}
			}
			n, err := io.ReadFull(r, buf)
			if n > 0 {
				full <- buf[:n]
			}
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return
			}
			if err != nil {
				readErr = err // read by the parser after full is closed
				return
			}
		}
	}()
	var feedErr error
	for buf := range full {
		if feedErr == nil {
			if feedErr = feed(buf); feedErr != nil {
				close(done)
			}
		}
		free <- buf[:cap(buf)]
	}
	switch {
	case feedErr != nil:
		return feedErr
	case readErr != nil:
		return fmt.Errorf("read kallsyms: %w", readErr)
	}
	return nil
}

// LoadModules reads module extents from a file in /proc/modules format
// (lines of "ext4 1089536 2 - Live 0xffffffffc0a00000") so that the last
// symbol of each module ends at the module's end rather than up to 1 MiB
// later. The extent is [address, address+size) in bytes; since Linux 6.4
// it spans the module's text and data, so it bounds rather than equals the
// text. Modules that kallsyms does not list, and lines with a zero address
// (kptr_restrict), are ignored. It returns an error only when the file
// cannot be read; malformed lines are skipped.
func (k *Table) LoadModules(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open modules: %w", err)
	}
	defer f.Close()
	idx := make(map[string]uint16, len(k.modules))
	for i, m := range k.modules {
		idx[m] = uint16(i)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, r, ok := ParseModuleLine(sc.Text())
		if i, known := idx[name]; ok && known && i != 0 {
			if k.modEnd == nil {
				k.modEnd = make(map[uint16]AddrRange)
			}
			k.modEnd[i] = r
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read modules: %w", err)
	}
	return nil
}

// ParseModuleLine parses one /proc/modules line into the module's name
// and extent; ok is false for a malformed line, a zero address
// (kptr_restrict) or an extent past the end of the address space.
func ParseModuleLine(line string) (name string, r AddrRange, ok bool) {
	f := strings.Fields(line)
	if len(f) < 6 {
		return "", AddrRange{}, false
	}
	size, err1 := strconv.ParseUint(f[1], 10, 64)
	addr, err2 := strconv.ParseUint(strings.TrimPrefix(f[5], "0x"), 16, 64)
	if err1 != nil || err2 != nil || addr == 0 || addr+size < addr { // no extent that wraps
		return "", AddrRange{}, false
	}
	return f[0], AddrRange{addr, addr + size}, true
}
