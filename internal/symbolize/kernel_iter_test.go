package symbolize

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
)

// TestKernelSymbolizerIterFallback: the iterator's table when it works;
// the kallsyms file when it cannot be opened or its stream is corrupt,
// with the iterator's error kept; both errors in the note when both
// fail. Every stream opened is closed.
func TestKernelSymbolizerIterFallback(t *testing.T) {
	text, err := os.ReadFile("testdata/kallsyms.txt")
	if err != nil {
		t.Fatal(err)
	}
	var streams []*symtest.FakeStream
	iter := func(data []byte) func() (io.ReadCloser, error) {
		return func() (io.ReadCloser, error) {
			s := &symtest.FakeStream{Reader: bytes.NewReader(data)}
			streams = append(streams, s)
			return s, nil
		}
	}
	failing := func() (io.ReadCloser, error) { return nil, errors.New("no BTF") }
	// Only the iterator names abort_iter: it is not in the file.
	iterText := strings.Replace(string(text), " abort\n", " abort_iter\n", 1)
	const abort = 0xffffffff81001010
	for _, tt := range []struct {
		name      string
		iter      func() (io.ReadCloser, error)
		path      string
		want      string // the function at abort
		iterErr   string
		noteWants []string
	}{
		{"iterator", iter(symtest.KallsymsRecords(t, []byte(iterText))), "testdata/kallsyms.txt", "abort_iter", "", nil},
		{"no iterator", nil, "testdata/kallsyms.txt", "abort", "", nil},
		{"iterator fails", failing, "testdata/kallsyms.txt", "abort", "no BTF", nil},
		{"corrupt stream", iter([]byte("garbage, not records")), "testdata/kallsyms.txt", "abort", "malformed header", nil},
		{"both fail", failing, "testdata/missing", "", "no BTF", []string{"testdata/missing", "no BTF"}},
	} {
		k := newKernelSymbolizer(nil, tt.iter, tt.path, t.TempDir())
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
	for i, s := range streams {
		if s.Closed != 1 {
			t.Errorf("stream %d closed %d times, want once", i, s.Closed)
		}
	}
}

// TestSymbolizerKallsymsIter: Options.KallsymsIter reaches the kernel
// symbolizer, and hidden addresses from it give the kptr_restrict note.
func TestSymbolizerKallsymsIter(t *testing.T) {
	hidden := symtest.AppendRecord(symtest.AppendRecord(nil, 0, 'T', "_stext", ""), 0, 'T', "do_syscall_64", "")
	s, err := New(Options{
		ProcRoot:     t.TempDir(),
		KallsymsPath: "testdata/kallsyms.txt",
		KallsymsIter: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(hidden)), nil },
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
