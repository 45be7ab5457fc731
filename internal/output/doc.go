// Package output aggregates symbolized samples and writes them as profiles.
//
// It owns the last step of a run: an Aggregator merges the samples that
// share a process, a thread name (comm) and a symbolized stack into one
// Sample with a count and a CPU time in nanoseconds; WritePprof writes the
// result as a gzipped pprof profile (profile.proto, read by go tool pprof
// and most profile viewers), and WriteFolded writes it as folded stacks, one
// line per stack, root first, with a sample count (the input of
// flamegraph.pl and speedscope).
//
// The package reads stacks made by internal/symbolize and imports it for its
// types only. It needs nothing from the kernel and no privileges. It caches
// nothing between calls: an Aggregator holds one entry per distinct
// (pid, comm, stack) until it is dropped, and the pprof and folded writers
// build their interning tables afresh on every call.
package output
