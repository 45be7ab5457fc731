// Package counter counts perf events the way `perf stat` does: one
// perf_event_open(2) fd per event and per thread or CPU, read back as
// value, time enabled and time running (read_format TOTAL_TIME_ENABLED |
// TOTAL_TIME_RUNNING), with the kernel starting the counters at the
// command's exec (enable_on_exec) and folding children in (inherit).
// Events are named as internal/attach names them (`gprofile -l`); the
// formatting of results in perf stat's text, CSV and JSON layouts is pure
// and lives in format.go.
//
// Kernel interface: perf_event_open(2) (man 2 perf_event_open), the
// ioctls PERF_EVENT_IOC_ENABLE/DISABLE, and /proc/PID/task for -p.
// Privileges: root, or CAP_PERFMON, or kernel.perf_event_paranoid low
// enough for the target. perf's tools/perf/builtin-stat.c and
// util/stat.c are the reference for attrs, scaling and statistics.
package counter
