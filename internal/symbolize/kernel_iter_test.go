package symbolize

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/kallsyms"
)

// TestKernelSymbolizerIterFallback: the iterator's table when it works;
// the kallsyms file when it fails, with the iterator's error kept; both
// errors in the note when both fail.
func TestKernelSymbolizerIterFallback(t *testing.T) {
	text, err := os.ReadFile("testdata/kallsyms.txt")
	if err != nil {
		t.Fatal(err)
	}
	// Only the iterator names abort_iter: it is not in the file.
	iterText := strings.Replace(string(text), " abort\n", " abort_iter\n", 1)
	iter := func() (*kallsyms.Table, error) { return kallsyms.Parse(strings.NewReader(iterText)) }
	failing := func() (*kallsyms.Table, error) { return nil, errors.New("no BTF") }
	const abort = 0xffffffff81001010
	for _, tt := range []struct {
		name      string
		iter      func() (*kallsyms.Table, error)
		path      string
		want      string // the function at abort
		iterErr   string
		noteWants []string
	}{
		{"iterator", iter, "testdata/kallsyms.txt", "abort_iter", "", nil},
		{"no iterator", nil, "testdata/kallsyms.txt", "abort", "", nil},
		{"iterator fails", failing, "testdata/kallsyms.txt", "abort", "no BTF", nil},
		{"both fail", failing, "testdata/missing", "", "no BTF", []string{"testdata/missing", "no BTF"}},
	} {
		k := newKernelSymbolizer(nil, tt.iter, tt.path, t.TempDir(), "")
		fi := k.resolve(abort)
		if fi.function != tt.want {
			t.Errorf("%s: resolve(abort) = %q, want %q", tt.name, fi.function, tt.want)
		}
		if (k.iterErr == nil) != (tt.iterErr == "") || (k.iterErr != nil && !strings.Contains(k.iterErr.Error(), tt.iterErr)) {
			t.Errorf("%s: iterator error %v, want one with %q", tt.name, k.iterErr, tt.iterErr)
		}
		for _, w := range tt.noteWants {
			if !strings.Contains(k.note, w) {
				t.Errorf("%s: note %q; want it to mention %q", tt.name, k.note, w)
			}
		}
		if len(tt.noteWants) == 0 && k.note != "" {
			t.Errorf("%s: note %q, want none", tt.name, k.note)
		}
	}
}

// TestSymbolizerKallsymsIter: Options.KallsymsIter reaches the kernel
// symbolizer, and hidden addresses from it give the kptr_restrict note.
func TestSymbolizerKallsymsIter(t *testing.T) {
	hidden := "0000000000000000 T _stext\n0000000000000000 T do_syscall_64\n"
	s, err := New(Options{
		ProcRoot:     t.TempDir(),
		KallsymsPath: "testdata/kallsyms.txt",
		KallsymsIter: func() (*kallsyms.Table, error) { return kallsyms.Parse(strings.NewReader(hidden)) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st := s.Stack(1, []uint64{0xffffffff81002010}, nil)
	if f := st.Frames[0]; f.Reason != ReasonKernelHidden {
		t.Errorf("frame %+v, want reason %v", f, ReasonKernelHidden)
	}
	if note := s.Note(); !strings.Contains(note, "kptr_restrict") {
		t.Errorf("Note() = %q; want it to mention kptr_restrict", note)
	}
}
