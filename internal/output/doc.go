// Package output aggregates symbolized samples and writes them as profiles.
//
// It owns the last step of a run: an Aggregator merges the samples that
// share a process, a thread name (comm), optionally a thread and a CPU
// (SampleKey), and a symbolized stack into one Sample with a count and a
// CPU time in nanoseconds. It holds every location (the frames of one
// address) once; pprof location i+1 is its location i, and the writers of
// aggregated samples walk its stacks and locations:
//
//   - WritePprof writes a gzipped pprof profile (profile.proto, read by go
//     tool pprof and most profile viewers), with the labels Meta.Labels
//     chooses among pid, tid, comm and cpu;
//   - WriteFolded writes folded stacks, one line per stack, root first,
//     with a sample count (the input of flamegraph.pl and speedscope);
//   - WriteFlameHTML writes one self-contained HTML page with an
//     interactive flame graph (d3-flame-graph, inlined; see
//     flamegraph/README.md), drawing what the folded stacks hold;
//   - WriteTop writes a table of the functions with the most samples.
//
// The per-sample writers stream samples as they come, without
// aggregating: TextWriter as readable text (one block per sample, kernel
// and user frames), JSONWriter as JSON Lines (JSON_SCHEMA.md).
//
// It reads stacks made by internal/symbolize (for its types only), needs
// nothing from the kernel, and caches nothing between calls: an
// Aggregator holds one entry per distinct (key, stack) until dropped.
package output
