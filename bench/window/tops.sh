#!/usr/bin/env bash
# bench/window/tops.sh: what --call-graph dwarf copies and costs per
# workload, for one or more gprofile binaries side by side (say, a build
# without the learned stack tops and one with them). Builds the workloads
# of bench/window/sweep.sh (no frame pointers: C chain, qsort comparator,
# 300-deep recursion, a thread, Rust, Go, Node), runs each alone for 7 s
# and profiles it with each binary in turn (gprofile -p PID -f 999 -d 4,
# ROUNDS rounds, interleaved), and prints a markdown table: bytes of stack
# copied per sample, in-kernel ns per run of the perf_event program
# (run_time_ns / run_cnt, kernel.bpf_stats_enabled=1, read 3.5 s in; the
# idle CPU's runs are filtered out early and count too), user stacks whole
# and cut, stacks cut at a learned top, and gprofile's CPU time and peak
# RSS. Run as root: bench/window/tops.sh GPROFILE [GPROFILE...].
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
[ $# -ge 1 ] || { echo "usage: $0 GPROFILE [GPROFILE...]" >&2; exit 2; }
rounds=${ROUNDS:-2}
work=$(mktemp -d /tmp/gprofile-tops.XXXXXX)
old_stats=$(sysctl -n kernel.bpf_stats_enabled)
wp=
cleanup() {
	if [ -n "$wp" ]; then kill "$wp" 2>/dev/null; rm -f /tmp/perf-"$wp".map; fi
	wait 2>/dev/null || true
	sysctl -qw kernel.bpf_stats_enabled="$old_stats"
	rm -rf "$work"
}
trap cleanup EXIT
src=$root/cmd/gprofile/testdata
. "$here/lib.sh"
build_workloads "$src" "$work"
sysctl -qw kernel.bpf_stats_enabled=1

echo "| workload | gprofile | stack bytes/sample | in-kernel ns/run | user stacks (complete, cut) | cut at a learned top | gprofile CPU s | peak RSS MiB |"
echo "|---|---|---|---|---|---|---|---|"
for w in chain qsort recurse thread chainrs gowork node; do
	for r in $(seq "$rounds"); do
		for gp in "$@"; do
			if [ "$w" = node ]; then
				(cd "$work" && exec node --perf-basic-prof "$src/sym/hot.js" 7 >/dev/null) &
			else
				"$work/$w" 7 >/dev/null &
			fi
			wp=$!
			sleep 0.5
			out=$work/out.pb.gz
			/usr/bin/time -f "%U %S %M" -o "$work/time" "$gp" -p "$wp" -d 4 -f 999 --call-graph dwarf -o "$out" 2>"$work/err" &
			tp=$!
			sleep 3.5
			gpid=$(pgrep -P "$tp" | head -1)
			read -r ns cnt < <(prog_stats "$gpid")
			wait "$tp"
			kill "$wp" 2>/dev/null || true
			wait "$wp" 2>/dev/null || true
			rm -f /tmp/perf-"$wp".map
			wp=
			comments=$(go tool pprof -comments "$out" 2>/dev/null)
			bytes=$(sed -n 's/.*(\([0-9]*\) per sample).*/\1/p' <<<"$comments")
			tops=$(sed -n 's/.* \([0-9]*\) stacks cut at a learned stack top.*/\1/p' <<<"$comments")
			stacks=$(sed -n 's/^user stacks: \([0-9]*\) complete, \([0-9]*\) cut.*/\1, \2/p' <<<"$comments")
			read -r us ss rss <"$work/time"
			nsps=$(awk -v n="$ns" -v c="$cnt" 'BEGIN { if (c) printf "%.0f", n/c; else print "n/a" }')
			echo "| $w | $gp | ${bytes:-n/a} | $nsps | ${stacks:-n/a} | ${tops:-n/a} | $(awk -v u="$us" -v s="$ss" 'BEGIN { printf "%.2f", u+s }') | $((rss / 1024)) |"
		done
	done
done
