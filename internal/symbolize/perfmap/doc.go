// Package perfmap reads the perf maps that JIT compilers write
// (/tmp/perf-PID.map: V8 with --perf-basic-prof, the JVM with
// perf-map-agent, .NET, Python 3.12's -X perf), one line per piece of
// code, into a [Table] where later lines win over the code they overlap.
//
// # Spec
//
// The Linux kernel's tools/perf/Documentation/jit-interface.txt:
// "START SIZE symbolname", START and SIZE in hex.
package perfmap
