#!/usr/bin/env bash
# bench/window/sweep.sh: what --call-graph dwarf costs by window size.
# Runs a set of workloads built without frame pointers (C chain, qsort
# comparator, 300-deep recursion, a thread, Rust, Go, Node), then
# profiles them with gprofile -p at 999 Hz for SECS seconds per
# configuration: --call-graph fp, and dwarf with windows of 8, 16, 32 and
# 64 KiB; bpftrace's profile program too when installed. Prints a
# markdown table: in-kernel ns per sample (run_time_ns / run_cnt of the
# perf_event BPF program, kernel.bpf_stats_enabled=1), bytes of stack
# copied per sample, samples whose copy the window cut, and the share of
# user stacks unwound whole (gprofile's "user stacks" line). Run as root
# from anywhere: bench/window/sweep.sh [GPROFILE]. Takes about 1.5 min.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
gp=${1:-$root/bin/gprofile}
secs=${SECS:-10}
work=$(mktemp -d /tmp/gprofile-window.XXXXXX)
old_stats=$(sysctl -n kernel.bpf_stats_enabled)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	sysctl -qw kernel.bpf_stats_enabled="$old_stats"
	rm -rf "$work" /tmp/perf-"${node_pid:-0}".map
}
trap cleanup EXIT
src=$root/cmd/gprofile/testdata
. "$here/lib.sh"
build_workloads "$src" "$work"
total=$((6 * secs + 30))
for w in chain qsort recurse thread chainrs gowork; do
	"$work/$w" "$total" >/dev/null &
	pids+=($!)
done
(cd "$work" && exec node --perf-basic-prof "$src/sym/hot.js" "$total" >/dev/null) &
node_pid=$!
pids+=($node_pid)
sleep 2
sysctl -qw kernel.bpf_stats_enabled=1

echo "| configuration | in-kernel ns/run | stack bytes/sample | copies cut by the window | user stacks whole | program runs (samples lost) |"
echo "|---|---|---|---|---|---|"
for cg in fp dwarf,8192 dwarf,16384 dwarf,32768 dwarf,65536; do
	out=$work/out.pb.gz
	"$gp" -q -f 999 -d "$secs" --call-graph "$cg" -o "$out" 2>"$work/err" &
	gpid=$!
	sleep $((secs - 1))
	read -r ns cnt < <(prog_stats "$gpid")
	wait "$gpid"
	comments=$(go tool pprof -comments "$out" 2>/dev/null)
	bytes=$(sed -n 's/.*(\([0-9]*\) per sample).*/\1/p' <<<"$comments")
	cut=$(sed -n 's/.* \([0-9]*\) cut by the window size.*/\1/p' <<<"$comments")
	whole=$(sed -n 's/^user stacks: \([0-9]*\) complete, \([0-9]*\) cut.*/\1 \2/p' <<<"$comments")
	lost=$(sed -n 's/^samples lost: \([0-9]*\).*/\1/p' <<<"$comments")
	pct=n/a
	if [ -n "$whole" ]; then
		set -- $whole
		pct=$(awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f %% (%d of %d)", 100*a/(a+b), a, a+b }')
	fi
	nsps=$(awk -v n="$ns" -v c="$cnt" 'BEGIN { if (c) printf "%.0f", n/c; else print "n/a" }')
	echo "| gprofile --call-graph $cg | $nsps | ${bytes:-0} | ${cut:-n/a} | $pct | $cnt runs ($lost lost) |"
done
if command -v bpftrace >/dev/null; then
	bpftrace -e 'profile:hz:999 { @[kstack, ustack, comm] = count(); }' >"$work/bt.out" 2>&1 &
	bpid=$!
	sleep "$secs"
	read -r ns cnt < <(prog_stats "$bpid")
	kill -INT "$bpid"
	wait "$bpid" || true
	nsps=$(awk -v n="$ns" -v c="$cnt" 'BEGIN { if (c) printf "%.0f", n/c; else print "n/a" }')
	echo "| bpftrace profile:hz:999 (kstack, ustack, comm) | $nsps | 0 | n/a | n/a (frame pointers) | $cnt runs |"
fi
