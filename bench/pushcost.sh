#!/usr/bin/env bash
# Per-interval cost of a continuous run: gprofile profiles the whole
# machine at PUSH_HZ for PUSH_SECONDS twice, while bench/workload.c keeps
# PUSH_THREADS threads busy:
#   base  gprofile -a -F HZ -d S -o FILE       (one profile at the end)
#   push  gprofile -a -F HZ -d S --push pyroscope://127.0.0.1:PORT
#         --interval PUSH_INTERVAL --metrics ... (to bench/pushsink, the
#         fake Pyroscope that decodes every profile)
# and prints, for each, gprofile's CPU time (utime+stime from
# /proc/PID/stat just before it exits) as a share of one CPU and of the
# machine, its peak RSS (VmHWM) and its last RSS (VmRSS); for push, the
# intervals, profiles sent, bytes sent, the wall time spent building
# them (gprofile_interval_build_seconds_total), the CPU time of that
# work on its thread (gprofile_interval_build_cpu_seconds_total) per
# interval and as a share of one CPU and of the machine, and the CPU
# time per interval over base's, and the live Go heap
# (go_gc_heap_live_bytes) beside the push run's RSS. Needs root, cc and
# go. Run it under the heavy lock:
#   sudo flock /tmp/gprofile-heavy.lock bench/pushcost.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PUSH_HZ=${PUSH_HZ:-99}
PUSH_SECONDS=${PUSH_SECONDS:-60}
PUSH_INTERVAL=${PUSH_INTERVAL:-10s}
PUSH_THREADS=${PUSH_THREADS:-1}
PUSH_PORT=${PUSH_PORT:-14040}
METRICS_PORT=${METRICS_PORT:-14041}
GO=${GO:-go}

case $PUSH_INTERVAL in
*[0-9]s) ;;
*)
	echo "pushcost: PUSH_INTERVAL is in seconds (10s), not $PUSH_INTERVAL" >&2
	exit 2
	;;
esac
if [ "$(id -u)" != 0 ]; then
	echo "pushcost: needs root (BPF, perf events): sudo $0" >&2
	exit 2
fi
work=$(mktemp -d /tmp/gprofile-pushcost.XXXXXX)
pids=()
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT

$GO build -o "$work/gprofile" ./cmd/gprofile
$GO build -o "$work/pushsink" ./bench/pushsink
cc -O2 -g -fno-omit-frame-pointer -pthread -o "$work/workload" bench/workload.c

clk=$(getconf CLK_TCK)
ncpu=$(nproc)

# measure NAME ARGS...: runs gprofile with ARGS beside the workload and
# prints cpu_s, rss and hwm (kB) sampled just before it exits.
measure() {
	local name=$1
	shift
	"$work/workload" "$((PUSH_SECONDS + 5))" "$PUSH_THREADS" >/dev/null &
	local wl=$!
	"$work/gprofile" -a -F "$PUSH_HZ" -d "${PUSH_SECONDS}s" "$@" 2>"$work/$name.err" &
	local gp=$!
	local cpu=0 rss=0 hwm=0 line v
	while kill -0 "$gp" 2>/dev/null; do
		if line=$(cat "/proc/$gp/stat" 2>/dev/null); then
			line=${line##*) }
			# fields after ") ": 12th and 13th are utime and stime
			set -- $line
			cpu=$(( ${12} + ${13} ))
			# a zombie's status has no Vm lines: keep the last ones read
			v=$(awk '/^VmRSS/ {print $2}' "/proc/$gp/status" 2>/dev/null || true)
			[ -n "$v" ] && rss=$v
			v=$(awk '/^VmHWM/ {print $2}' "/proc/$gp/status" 2>/dev/null || true)
			[ -n "$v" ] && hwm=$v
			if [ "$name" = push ]; then
				curl -fsS "http://127.0.0.1:$METRICS_PORT/metrics" >"$work/metrics.tmp" 2>/dev/null && mv "$work/metrics.tmp" "$work/metrics.txt" || true
			fi
		fi
		sleep 1
	done
	wait "$gp" || { echo "pushcost: gprofile ($name) failed:" >&2; cat "$work/$name.err" >&2; exit 1; }
	kill "$wl" 2>/dev/null || true
	wait "$wl" 2>/dev/null || true
	echo "$cpu $rss $hwm"
}

metric() { awk -v m="$1" '$1 == m {print $2}' "$work/metrics.txt"; }

read -r bcpu brss bhwm < <(measure base -o "$work/base.pb.gz")

"$work/pushsink" -addr "127.0.0.1:$PUSH_PORT" >"$work/sink.out" &
sink=$!
pids+=("$sink")
read -r pcpu prss phwm < <(measure push --push "pyroscope://127.0.0.1:$PUSH_PORT" --interval "$PUSH_INTERVAL" --metrics "127.0.0.1:$METRICS_PORT")
kill -TERM "$sink"
wait "$sink" || true

intervals=$(metric gprofile_intervals_total)
build=$(metric gprofile_interval_build_seconds_total)
buildcpu=$(metric gprofile_interval_build_cpu_seconds_total)
live=$(metric go_gc_heap_live_bytes)
sent=$(metric gprofile_push_sent_total)
bytes=$(metric gprofile_push_sent_bytes_total)
samples=$(metric gprofile_samples_total)
echo "pushcost: ${PUSH_SECONDS}s at ${PUSH_HZ} Hz whole machine ($ncpu CPUs), workload $PUSH_THREADS thread(s), interval $PUSH_INTERVAL; output in $work"
awk -v clk="$clk" -v s="$PUSH_SECONDS" -v n="$ncpu" \
	-v bcpu="$bcpu" -v brss="$brss" -v bhwm="$bhwm" \
	-v pcpu="$pcpu" -v prss="$prss" -v phwm="$phwm" \
	-v iv="$intervals" -v build="$build" -v buildcpu="$buildcpu" -v live="$live" -v ivs="${PUSH_INTERVAL%s}" -v sent="$sent" -v bytes="$bytes" -v samples="$samples" 'BEGIN {
	printf "| run  | CPU s | %% of one CPU | %% of machine | RSS MB | peak RSS MB |\n"
	printf "|------|------:|-------------:|-------------:|-------:|------------:|\n"
	printf "| base | %.2f | %.3f | %.3f | %.1f | %.1f |\n", bcpu/clk, 100*bcpu/clk/s, 100*bcpu/clk/s/n, brss/1024, bhwm/1024
	printf "| push | %.2f | %.3f | %.3f | %.1f | %.1f |\n", pcpu/clk, 100*pcpu/clk/s, 100*pcpu/clk/s/n, prss/1024, phwm/1024
	printf "push: %d samples, %d intervals, %d profiles sent, %.0f kB sent (%.1f kB per profile), build %.1f ms per interval (wall), CPU over base %.1f ms per interval (one run each: within run-to-run noise)\n", samples, iv, sent, bytes/1024, (sent ? bytes/1024/sent : 0), (iv ? 1000*build/iv : 0), (iv ? 1000*(pcpu-bcpu)/clk/iv : 0)
	bc = iv ? buildcpu/iv : 0
	printf "push: interval work %.1f ms CPU per %s s interval (its thread): %.3f %% of one CPU, %.3f %% of the machine; live Go heap %.1f MB at the last metrics read\n", 1000*bc, ivs, 100*bc/ivs, 100*bc/ivs/n, live/1048576
}'
cat "$work/sink.out"
