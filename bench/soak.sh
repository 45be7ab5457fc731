#!/usr/bin/env bash
# Soak test: profile the whole system for SOAK_SECONDS at SOAK_HZ while
# thousands of short-lived processes come and go, record gprofile's
# resident memory, threads and open file descriptors every SOAK_EVERY
# seconds, with its goroutines and Go heap (GPROFILE_STATS, see
# cmd/gprofile/devprof.go), and fail when any of them grows without bound.
#
#   sudo bench/soak.sh                      # 600 s at 999 Hz
#   sudo SOAK_SECONDS=120 bench/soak.sh     # a shorter run
#
# The churn: SOAK_WORKERS loops, each starting in turn
#   - sh -c 'i=0; while [ $i -lt 20000 ]; ...'  (a shell that spins ~50 ms)
#   - one of SOAK_BINS tiny C programs, each compiled separately (distinct
#     build IDs and inodes), that spins 50 ms and exits
#   - every SOAK_FRESH-th round (default 10; 0: never), a fresh copy of
#     one of them (a new inode, deleted after it ran), as test binaries
#     and `go run` produce
# so gprofile sees new pids, new binaries and exited processes all along.
#
# Output, in SOAK_DIR (default: a new directory under /tmp, printed):
#   soak.csv       t_s,rss_kb,anon_kb,file_kb,hwm_kb,threads,fds,forks,
#                  goroutines,heap_inuse_kb,heap_objects:
#                  gprofile's VmRSS (RssAnon: heap; RssFile: mapped
#                  files), VmHWM, threads, open fds, the processes
#                  started on the machine since the soak began, and
#                  gprofile's last GPROFILE_STATS line (goroutines, Go
#                  heap in use, live heap objects; written every 10 s)
#   stats.txt      the GPROFILE_STATS lines
#   soak.pb.gz     the profile gprofile wrote at SIGINT
#   gprofile.err   gprofile's stderr (summary, unnamed-frame reasons)
#
# Verdict: the samples after SOAK_WARMUP seconds are cut in thirds; the
# soak fails (exit 1) when the mean of the last third exceeds the first
# third's by more than 50% and 20 MB of RSS, or by more than 20 fds or
# 20 threads or 20 goroutines; or when gprofile dies, exits non-zero, or writes a profile
# that `go tool pprof -top` cannot read. Needs root, gcc and go.
# GPROFILE_MEMPROFILE=FILE (passed on) makes gprofile write a heap
# profile at the end.
#
# SOAK_PUSH=1 runs gprofile continuously instead: --push to bench/pushsink
# (a fake Pyroscope that decodes every profile) on 127.0.0.1:SOAK_PUSH_PORT,
# one profile per service every SOAK_INTERVAL (10s), with --metrics on
# SOAK_METRICS_PORT; soak.csv gets the queue's bytes and profiles sent,
# dropped and failed (push_errors) from the metrics page. At the end it
# checks that nothing was lost without being counted: the sink decoded
# every profile gprofile says it pushed, with no decode error, and the
# samples in them add up to the samples gprofile read when it dropped
# none (fewer when it dropped some, each drop counted). The profile
# check with go tool pprof is then left out: there is no -o file.
set -euo pipefail
cd "$(dirname "$0")/.."

SOAK_SECONDS=${SOAK_SECONDS:-600}
SOAK_HZ=${SOAK_HZ:-999}
SOAK_EVERY=${SOAK_EVERY:-10}
SOAK_WARMUP=${SOAK_WARMUP:-60}
SOAK_WORKERS=${SOAK_WORKERS:-2}
SOAK_BINS=${SOAK_BINS:-64}
SOAK_FRESH=${SOAK_FRESH:-10}
SOAK_PUSH=${SOAK_PUSH:-0}
SOAK_INTERVAL=${SOAK_INTERVAL:-10s}
SOAK_PUSH_PORT=${SOAK_PUSH_PORT:-14060}
SOAK_METRICS_PORT=${SOAK_METRICS_PORT:-14061}
SOAK_DIR=${SOAK_DIR:-$(mktemp -d /tmp/gprofile-soak.XXXXXX)}
GO=${GO:-go}

if [ "$(id -u)" != 0 ]; then
	echo "soak: needs root (BPF, perf events): sudo $0" >&2
	exit 2
fi
if [ "$SOAK_WARMUP" -ge "$SOAK_SECONDS" ]; then
	echo "soak: SOAK_WARMUP ($SOAK_WARMUP s) must be shorter than SOAK_SECONDS ($SOAK_SECONDS s)" >&2
	exit 2
fi
mkdir -p "$SOAK_DIR/bins"
mode="one profile at SIGINT"
if [ "$SOAK_PUSH" = 1 ]; then
	mode="pushed every $SOAK_INTERVAL to bench/pushsink"
fi
echo "soak: ${SOAK_SECONDS}s at ${SOAK_HZ} Hz, $SOAK_WORKERS churn workers, $SOAK_BINS binaries, a fresh copy every ${SOAK_FRESH} rounds, $mode; output in $SOAK_DIR"

# Everything started here dies with the script, whatever ends it.
pids=()
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT

$GO build -o "$SOAK_DIR/gprofile" ./cmd/gprofile
if [ "$SOAK_PUSH" = 1 ]; then
	$GO build -o "$SOAK_DIR/pushsink" ./bench/pushsink
fi

# The tiny program: a known chain that spins for 50 ms and exits.
cat >"$SOAK_DIR/tiny.c" <<'EOF'
#include <time.h>
volatile unsigned long sink;
__attribute__((noinline)) void tiny_spin(void)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		for (int i = 0; i < 10000; i++)
			sink = sink * 6364136223846793005UL + SEED;
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 50000000L);
}
int main(void) { tiny_spin(); return 0; }
EOF
for i in $(seq 1 "$SOAK_BINS"); do
	gcc -O1 -g -fno-omit-frame-pointer -DSEED="$i"UL -o "$SOAK_DIR/bins/tiny-$i" "$SOAK_DIR/tiny.c"
done

forks() { awk '/^processes/ {print $2}' /proc/stat; }

churn() {
	local w=$1 n=0 b fresh
	set +e # a failed round must not end the worker
	while :; do
		n=$((n + 1))
		sh -c 'i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done'
		b=$(((n * SOAK_WORKERS + w) % SOAK_BINS + 1))
		"$SOAK_DIR/bins/tiny-$b"
		if [ "$SOAK_FRESH" -gt 0 ] && [ $((n % SOAK_FRESH)) = 0 ]; then
			fresh="$SOAK_DIR/bins/fresh-$w-$n"
			cp "$SOAK_DIR/bins/tiny-$b" "$fresh"
			"$fresh"
			rm -f "$fresh"
		fi
	done
}

stats="$SOAK_DIR/stats.txt"
rm -f "$stats"
out=(-o "$SOAK_DIR/soak.pb.gz")
if [ "$SOAK_PUSH" = 1 ]; then
	"$SOAK_DIR/pushsink" -addr "127.0.0.1:$SOAK_PUSH_PORT" >"$SOAK_DIR/sink.out" 2>&1 &
	sink=$!
	pids+=("$sink")
	out=(--push "pyroscope://127.0.0.1:$SOAK_PUSH_PORT" --interval "$SOAK_INTERVAL" --metrics "127.0.0.1:$SOAK_METRICS_PORT")
fi
GPROFILE_STATS=$stats "$SOAK_DIR/gprofile" -f "$SOAK_HZ" "${out[@]}" 2>"$SOAK_DIR/gprofile.err" &
gp=$!
pids=("$gp" "${pids[@]}")
sleep 1
if ! kill -0 "$gp" 2>/dev/null; then
	echo "soak: gprofile did not start:" >&2
	cat "$SOAK_DIR/gprofile.err" >&2
	exit 1
fi
forks0=$(forks)
for w in $(seq 1 "$SOAK_WORKERS"); do
	churn "$w" >/dev/null 2>&1 &
	pids+=("$!")
done

# pushcheck ERR SINK: nothing lost that was not counted. gprofile's
# summary (ERR) says "N samples (L lost) in ..., P profiles pushed, D
# dropped, E push errors"; the sink (SINK) says "requests=R profiles=Q
# samples=S ... decode_errors=X". Q must be P and X 0; S must be N when D
# is 0, and less when D is not.
pushcheck() {
	awk '
	FNR == NR && /profiles pushed/ {
		for (i = 1; i <= NF; i++) {
			if ($i == "samples") n = $(i - 1)
			if ($i == "profiles" && $(i + 1) == "pushed,") p = $(i - 1)
			if ($i == "dropped,") d = $(i - 1)
		}
		found = 1
	}
	FNR != NR {
		for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
	}
	END {
		if (!found) { print "soak: FAIL: no push summary from gprofile"; exit 1 }
		printf "soak: push: gprofile read %d samples, pushed %d profiles, dropped %d; the sink decoded %d profiles holding %d samples, %d decode errors\n", n, p, d, v["profiles"], v["samples"], v["decode_errors"]
		bad = 0
		if (v["profiles"] != p) { print "soak: FAIL: the sink did not decode every profile pushed"; bad = 1 }
		if (v["decode_errors"] != 0) { print "soak: FAIL: the sink could not decode some requests"; bad = 1 }
		if (d == 0 && v["samples"] != n) { print "soak: FAIL: samples lost without being counted (no profile was dropped)"; bad = 1 }
		if (d > 0 && v["samples"] >= n) { print "soak: FAIL: profiles dropped, yet every sample arrived"; bad = 1 }
		exit bad
	}' "$1" "$2"
}

csv="$SOAK_DIR/soak.csv"
# metric NAME: the value of NAME on gprofile's metrics page just read.
metric() { awk -v m="$1" '$1 == m {v = $2} END {printf "%d", v}' "$SOAK_DIR/metrics.txt" 2>/dev/null; }
pushcols=
if [ "$SOAK_PUSH" = 1 ]; then
	pushcols=,queue_bytes,sent,dropped,push_errors
fi
echo "t_s,rss_kb,anon_kb,file_kb,hwm_kb,threads,fds,forks,goroutines,heap_inuse_kb,heap_objects$pushcols" >"$csv"
start=$(date +%s)
while :; do
	now=$(date +%s)
	t=$((now - start))
	if ! status=$(cat "/proc/$gp/status" 2>/dev/null); then
		echo "soak: gprofile (pid $gp) died at ${t}s:" >&2
		cat "$SOAK_DIR/gprofile.err" >&2
		exit 1
	fi
	rss=$(awk '/^VmRSS:/ {print $2}' <<<"$status")
	anon=$(awk '/^RssAnon:/ {print $2}' <<<"$status")
	file=$(awk '/^RssFile:/ {print $2}' <<<"$status")
	hwm=$(awk '/^VmHWM:/ {print $2}' <<<"$status")
	thr=$(awk '/^Threads:/ {print $2}' <<<"$status")
	fds=$(find "/proc/$gp/fd" -mindepth 1 -maxdepth 1 | wc -l)
	# unix_time goroutines heap_inuse_bytes heap_objects -> goroutines,kB,objects
	gstats=$(tail -1 "$stats" 2>/dev/null | awk 'NF == 4 {printf "%d,%d,%d", $2, $3 / 1024, $4}')
	pushvals=
	if [ "$SOAK_PUSH" = 1 ]; then
		curl -fsS "http://127.0.0.1:$SOAK_METRICS_PORT/metrics" >"$SOAK_DIR/metrics.txt" 2>/dev/null || true
		pushvals=,$(metric gprofile_push_queue_bytes),$(metric gprofile_push_sent_total),$(metric gprofile_push_dropped_total),$(metric gprofile_push_errors_total)
	fi
	echo "$t,$rss,$anon,$file,$hwm,$thr,$fds,$(($(forks) - forks0)),${gstats:-,,}$pushvals" >>"$csv"
	[ "$t" -ge "$SOAK_SECONDS" ] && break
	left=$((SOAK_EVERY - ($(date +%s) - now)))
	if [ "$left" -gt 0 ]; then sleep "$left"; fi
done

# Stop the churn, then gprofile (SIGINT writes the profile, or sends
# the last interval's), then the sink.
for p in "${pids[@]:1}"; do
	[ "$p" = "${sink:-}" ] || kill "$p" 2>/dev/null || true
done
kill -INT "$gp"
rc=0
wait "$gp" || rc=$?
pids=("${pids[@]:1}")
tail -2 "$SOAK_DIR/gprofile.err"
fail=0
if [ "$rc" != 0 ]; then
	echo "soak: FAIL: gprofile exited $rc" >&2
	fail=1
elif [ "$SOAK_PUSH" = 1 ]; then
	kill -TERM "$sink"
	wait "$sink" || true
	cat "$SOAK_DIR/sink.out"
	if ! pushcheck "$SOAK_DIR/gprofile.err" "$SOAK_DIR/sink.out"; then
		fail=1
	fi
elif ! $GO tool pprof -symbolize=none -top "$SOAK_DIR/soak.pb.gz" >"$SOAK_DIR/top.txt" 2>&1; then
	echo "soak: FAIL: go tool pprof -top cannot read the profile:" >&2
	head -5 "$SOAK_DIR/top.txt" >&2
	fail=1
fi

# Growth: the mean of the last third of the samples after warm-up against
# the first third's.
if ! awk -F, -v warm="$SOAK_WARMUP" '
	NR > 1 && $1 >= warm { n++; t[n] = $1; rss[n] = $2; thr[n] = $6; fd[n] = $7; gr[n] = $9; heap[n] = $10 }
	function mean(a, from, to,   s, i) { for (i = from; i <= to; i++) s += a[i]; return s / (to - from + 1) }
	END {
		if (n < 3) { print "soak: too few samples after warm-up"; exit 1 }
		k = int(n / 3)
		r0 = mean(rss, 1, k); r1 = mean(rss, n - k + 1, n)
		f0 = mean(fd, 1, k); f1 = mean(fd, n - k + 1, n)
		h0 = mean(thr, 1, k); h1 = mean(thr, n - k + 1, n)
		g0 = mean(gr, 1, k); g1 = mean(gr, n - k + 1, n)
		p0 = mean(heap, 1, k); p1 = mean(heap, n - k + 1, n)
		printf "soak: RSS %.1f -> %.1f MB, Go heap in use %.1f -> %.1f MB, fds %.1f -> %.1f, threads %.1f -> %.1f, goroutines %.1f -> %.1f (means of the first and last third after %d s)\n",
			r0 / 1024, r1 / 1024, p0 / 1024, p1 / 1024, f0, f1, h0, h1, g0, g1, warm
		bad = 0
		if (r1 > r0 * 1.5 && r1 - r0 > 20 * 1024) { print "soak: FAIL: RSS grew more than 50% and 20 MB"; bad = 1 }
		if (f1 - f0 > 20) { print "soak: FAIL: open fds grew by more than 20"; bad = 1 }
		if (h1 - h0 > 20) { print "soak: FAIL: threads grew by more than 20"; bad = 1 }
		if (g0 == 0) { print "soak: FAIL: no goroutine counts (GPROFILE_STATS)"; bad = 1 }
		if (g1 - g0 > 20) { print "soak: FAIL: goroutines grew by more than 20"; bad = 1 }
		exit bad
	}' "$csv"; then
	fail=1
fi
echo "soak: $(($(wc -l <"$csv") - 1)) readings in $csv"
if [ "$fail" = 0 ]; then
	echo "soak: PASS"
fi
exit "$fail"
