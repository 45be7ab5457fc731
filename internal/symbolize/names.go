package symbolize

import (
	"github.com/gprofile/gprofile/internal/symbolize/demangle"
	"github.com/gprofile/gprofile/internal/symbolize/elfio"
)

// ShortName returns function, a demangled name, without its C++
// parameter list and qualifiers, for display (see [demangle.ShortName]).
func ShortName(function string) string { return demangle.ShortName(function) }

// Notes returns lines for the user at the end of a run on what limited
// the names and lines that Stats does not count: files inside processes'
// roots opened without openat2's RESOLVE_IN_ROOT (a kernel or seccomp
// filter without openat2), and what debuginfod did (downloads, misses,
// failures, downloads unfinished at Close). It is empty when there is
// nothing to say, and may be called after Close.
func (s *Symbolizer) Notes() []string {
	var notes []string
	for _, n := range []string{elfio.OpenInRootNote(), s.debuginfod.Note()} {
		if n != "" {
			notes = append(notes, n)
		}
	}
	return notes
}
