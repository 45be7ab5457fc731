#!/bin/sh
# compare-stat.sh: runs perf stat and gprofile stat on the same
# deterministic programs (cmd/gprofile/testdata/statwork.c) and prints a
# Markdown table of the means of RUNS runs (default 5) side by side.
# Needs root, gcc, perf and go; run it alone on the machine (under
# /tmp/gprofile-heavy.lock where several jobs share it):
#   sudo scripts/compare-stat.sh
set -eu
cd "$(dirname "$0")/.."
GO=${GO:-go}
RUNS=${RUNS:-5}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
$GO build -o "$dir/gprofile" ./cmd/gprofile
gcc -O2 -o "$dir/statwork" cmd/gprofile/testdata/statwork.c

# count TOOL EVENT ARGS...: the mean count of EVENT (perf stat -x, field 1).
count() {
	tool=$1 ev=$2
	shift 2
	"$tool" stat -x, -r "$RUNS" -e "$ev" -- "$dir/statwork" "$@" 2>&1 >/dev/null |
		awk -F, -v ev="$ev" '$3 == ev { print $1 }'
}

echo "| program | event | perf stat | gprofile stat | difference |"
echo "| --- | --- | ---: | ---: | ---: |"
row() {
	ev=$1
	shift
	p=$(count perf "$ev" "$@")
	g=$(count "$dir/gprofile" "$ev" "$@")
	awk -v prog="statwork $*" -v ev="$ev" -v p="$p" -v g="$g" 'BEGIN {
		d = p == 0 ? 0 : 100 * (g - p) / p
		printf "| %s | %s | %s | %s | %+.2f %% |\n", prog, ev, p, g, d
	}'
}
row page-faults touch 20000
row page-faults fork 4 5000
row task-clock spin 150
row task-clock touch 20000
row context-switches sleep 100
row sched:sched_switch sleep 100
row cpu-migrations spin 150
