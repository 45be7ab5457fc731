// Package output aggregates symbolized samples and writes them as profiles.
//
// # Aggregating
//
// An [Aggregator] merges the samples that share a [SampleKey] (process,
// comm, optionally thread and CPU) and a stack made by internal/symbolize
// into one Sample with a count and a CPU time in nanoseconds, and the
// values of the columns AddColumn added (off-CPU and wall time, probe
// hits: each a pprof sample type; AddValues and Record.Values fill
// them; SetDisplayColumn picks the one folded, flame and top show). It holds
// every location (the frames of one address) once: pprof location i+1 is
// its location i, and the writers walk its stacks and locations.
//
// # Writers
//
//   - [WritePprof]: a gzipped pprof profile (profile.proto), with the
//     labels Meta.Labels chooses among pid, tid, comm, cpu and cgroup;
//   - [WriteFolded]: folded stacks, root first, with a count per line;
//   - [WriteFlameHTML]: one self-contained flame graph page;
//   - [WriteTop]: a table of the functions with the most samples.
//
// [TextWriter] (readable text) and [JSONWriter] (JSON Lines, JSON_SCHEMA.md)
// stream samples as they come, without aggregating.
//
// It needs nothing from the kernel and no privileges; what it keeps
// between calls is in docs/architecture.md (Output).
package output
