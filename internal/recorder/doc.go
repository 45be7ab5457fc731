// Package recorder runs a recording: it reads samples from the sampler
// (internal/attach) on one goroutine and symbolizes (internal/symbolize)
// and aggregates (internal/output) them on another, with a memo of the
// raw stacks of each process, the junk cut of frame-pointer walks, and
// eviction of exited processes.
//
// New opens the sampler and the symbolizer, Run records until its
// context is done and returns a Result (the aggregate, the counters, the
// symbol statistics), Close releases everything. Samples reach a Sink:
// the aggregate always, a per-sample writer when Config.Stream is set.
// A continuous run (Config.Interval) swaps the aggregate every interval
// and hands the old one to Config.OnInterval while sampling goes on.
// It needs what internal/attach needs: root, or CAP_BPF and CAP_PERFMON.
package recorder
