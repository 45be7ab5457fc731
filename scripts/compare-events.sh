#!/usr/bin/env bash
# Compares gprofile with `perf record -e EVENT -g` on the same workloads,
# one after the other: sched:sched_switch on a process that sleeps 1 ms in
# a loop, page-faults on one that touches new memory, and cpu-clock on a
# spinning chain. Prints a markdown table: samples taken by each, and the
# share of samples whose stack holds the workload's known user chain.
#   scripts/compare-events.sh            (root; needs gcc, perf, python3)
# env: SECONDS_PER_RUN (default 2), GPROFILE (default bin/gprofile)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${SECONDS_PER_RUN:-2}
gp=${GPROFILE:-bin/gprofile}
[ -x "$gp" ] || go build -o "$gp" ./cmd/gprofile
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
src=cmd/gprofile/testdata
for w in sleeper faulter chain; do
    gcc -O2 -g -fno-omit-frame-pointer -o "$tmp/$w" "$src/$w.c"
done

# collapse turns `perf script -F comm,ip,sym` (a header line per sample,
# then one "ADDR SYM+OFF" line per frame, leaf first, a blank line after)
# into folded stacks, root first.
collapse() {
    awk 'function flush() { if (comm != "") { s = comm; for (i = n; i >= 1; i--) s = s ";" f[i]; print s " 1" } comm = ""; n = 0 }
         /^[^ \t]/ { flush(); comm = $1; next }
         NF >= 2 { sym = $2; sub(/\+0x[0-9a-f]+$/, "", sym); f[++n] = sym; next }
         /^$/ { flush() }
         END { flush() }'
}

# share FOLDED REGEX: samples, and % of samples whose line matches REGEX.
share() {
    awk -v re="$2" '{n = $NF; t += n; if ($0 ~ re) m += n} END {printf "%d\t%.1f\n", t, t ? 100 * m / t : 0}' "$1"
}

echo "| event | workload | chain | perf samples | perf chain % | gprofile samples | gprofile chain % |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
run() { # event workload chain-regex rate-options (the same for both)
    local ev=$1 w=$2 re=$3 rate=$4
    "$tmp/$w" 60 >/dev/null & local pid=$!; pids+=("$pid")
    sleep 0.5
    # shellcheck disable=SC2086
    perf record -q -e "$ev" $rate -g -p "$pid" -o "$tmp/perf.data" -- sleep "$secs" 2>/dev/null
    perf script -i "$tmp/perf.data" -F comm,ip,sym 2>/dev/null | collapse > "$tmp/perf.folded"
    # shellcheck disable=SC2086
    "$gp" -q -e "$ev" ${rate/-F/-f} -d "$secs" -p "$pid" -E > "$tmp/gp.folded"
    kill "$pid"; wait "$pid" 2>/dev/null || true
    IFS=$'\t' read -r pn pc < <(share "$tmp/perf.folded" "$re")
    IFS=$'\t' read -r gn gc < <(share "$tmp/gp.folded" "$re")
    echo "| $ev | $w | \`$re\` | $pn | $pc | $gn | $gc |"
}
# faulter_touch is a leaf (gcc keeps no frame pointer there), so frame
# pointers skip its caller faulter_loop, in perf as in gprofile.
run sched:sched_switch sleeper 'main;sleeper_loop' "-c 1"
run page-faults faulter 'main;faulter_touch' "-c 1"
run cpu-clock chain 'main;chain_a;chain_b;chain_c' "-F 999"
