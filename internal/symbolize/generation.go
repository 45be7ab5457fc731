package symbolize

import (
	"github.com/gprofile/gprofile/internal/symbolize/objfile"
)

// Generation returns a count of the debug files that debuginfod
// downloads (DEBUGINFOD_URLS) brought in the background since New. When
// a binary needs a debug file that is neither on disk nor in the
// debuginfod cache, Stack does not wait for the download: it names that
// binary's frames from its own symbols, without source lines, until the
// file has arrived. From the Stack call after Generation changes, the
// binary is read again with its debug file and the caches of the
// processes that map it are dropped, so a caller that memoizes Stack
// results must drop its memo when Generation changes: read Generation
// before the Stack calls whose results it memoizes, and drop the memo
// when it differs from the value read last time. It is safe to call
// from any goroutine, at the cost of an atomic load.
func (s *Symbolizer) Generation() uint64 { return s.fetch.Gen.Load() }

// applyArrivals makes the Symbolizer use the debug files downloaded
// since the last call: the cached Binaries of those build IDs (without a
// debug file) are marked stale, to be read again at their next lookup
// (see binary), the processes' mappings of them are reopened, and those
// processes' address caches dropped. Only Stack calls it, so that no
// lookup is under way. The caller holds s.procs.mu.
func (s *Symbolizer) applyArrivals() {
	ids, gen := s.fetch.Take()
	s.applied = gen
	if len(ids) == 0 {
		return
	}
	arrived := make(map[string]bool, len(ids))
	for _, id := range ids {
		arrived[id] = true
	}
	stale := func(b *objfile.Binary) bool { return b != nil && b.DebugFile() == "" && arrived[b.BuildID()] }
	s.bins.each(func(be *binEntry) {
		if stale(be.bin) {
			be.stale = true
		}
	})
	if stale(s.vdso) {
		s.vdso, s.vdsoTried = nil, false
	}
	for _, p := range s.procs.m {
		for _, m := range p.maps {
			if m.opened && stale(m.bin) {
				m.opened, m.bin = false, nil
				clear(p.cache)
			}
		}
	}
}
