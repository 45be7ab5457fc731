package unwind

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"strings"
	"sync"
)

var vdsoImage = sync.OnceValues(readOwnVDSO)

// readOwnVDSO returns this process's vDSO image, read from /proc/self/mem
// at the [vdso] mapping of /proc/self/maps. Every 64-bit process of the
// running kernel maps the same image.
func readOwnVDSO() ([]byte, error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lo, hi uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasSuffix(sc.Text(), "[vdso]") {
			if _, err := fmt.Sscanf(sc.Text(), "%x-%x", &lo, &hi); err != nil {
				return nil, fmt.Errorf("parse [vdso] line: %w", err)
			}
			break
		}
	}
	if hi <= lo || hi-lo > 1<<20 {
		return nil, fmt.Errorf("no [vdso] mapping in /proc/self/maps")
	}
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	img := make([]byte, hi-lo)
	if _, err := mem.ReadAt(img, int64(lo)); err != nil {
		return nil, fmt.Errorf("read [vdso] from /proc/self/mem: %w", err)
	}
	return img, nil
}

// loadVDSOTable builds the table of the vDSO: from path when it names a
// file holding the image, else from this process's own mapping.
func loadVDSOTable(path string) (*Table, error) {
	if path != "" {
		return loadTable(path, "")
	}
	img, err := vdsoImage()
	if err != nil {
		return nil, err
	}
	f, err := elf.NewFile(bytes.NewReader(img))
	if err != nil {
		return nil, fmt.Errorf("parse vDSO image: %w", err)
	}
	return NewTable(f)
}
