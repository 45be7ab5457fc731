package symbolize

import (
	"github.com/gprofile/gprofile/internal/symbolize/debuginfo/debuginfod"
	"github.com/gprofile/gprofile/internal/symbolize/demangle"
	"github.com/gprofile/gprofile/internal/symbolize/elfio"
)

// ShortName returns function, a demangled name, without its C++
// parameter list and qualifiers, for display (see [demangle.ShortName]).
func ShortName(function string) string { return demangle.ShortName(function) }

// OpenInRootNote returns a note for the end of a run when files were
// opened without openat2's RESOLVE_IN_ROOT (see [elfio.OpenInRootNote]),
// else "".
func OpenInRootNote() string { return elfio.OpenInRootNote() }

// DebuginfodNote sums up the run's debuginfod downloads (see
// [debuginfod.Note]), or "" when debuginfod was off.
func DebuginfodNote() string { return debuginfod.Note() }
