#!/usr/bin/env bash
# bench/run.sh: gprofile side by side with perf, bpftrace and BCC on a
# CPU-bound workload. Run as root from anywhere (make bench builds gprofile
# first); bench/setup.sh installs the other profilers. Takes 8-10
# minutes on a quiet 2-CPU machine with the defaults, up to 16 when other
# jobs hold the CPUs (BENCHMARKS.md). Writes bench/results/DATE.md (and
# DATE.csv with every run) and prints the markdown.
#
# Environment (defaults in brackets):
#   BENCH_FREQS [99,999,4999]  frequencies, Hz
#   BENCH_REPS [5]             interleaved rounds of every configuration
#   BENCH_SECONDS [8]          workload seconds per run
#   BENCH_SHORT [3]            seconds of the second, shorter run of each
#                              configuration (fixed and per-sample CPU; 0: none)
#   BENCH_SERVER [1]           the "real server" variant: a Python, a Go
#                              (with DWARF) and a C++ process run beside
#                              the workload (bench/server; 0: the workload alone)
#   BENCH_PYTHON               the Python for it (default: a python3 on PATH
#                              that links libpython, else python3)
#   BENCH_CAPTURE_REPS [2]     repetitions of each timed 1 s capture
#   BENCH_LONG [60]            seconds of the long runs: gprofile, then perf --call-graph dwarf
#                              unless skipped (0: skip)
#   BENCH_RINGBUF [1]          run the ring buffer throughput test (0: skip)
#   BENCH_SKIP                 configurations to leave out, comma-separated
#                              (none, floor, perf, perf-dwarf, bpftrace, bcc,
#                              gprofile-fp, gprofile)
#   GPROFILE [bin/gprofile]    the gprofile binary to measure
#   BCC_KERNEL_SOURCE          kernel headers for BCC (found if unset)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root"

if [ "$(id -u)" != 0 ]; then
	echo "bench/run.sh: run as root (sudo make bench): it loads BPF programs" >&2
	exit 1
fi

freqs=${BENCH_FREQS:-99,999,4999}
reps=${BENCH_REPS:-5}
seconds=${BENCH_SECONDS:-8}
short=${BENCH_SHORT:-3}
server=${BENCH_SERVER:-1}
capture_reps=${BENCH_CAPTURE_REPS:-2}
long=${BENCH_LONG:-60}
ringbuf=${BENCH_RINGBUF:-1}
gprofile=${GPROFILE:-$root/bin/gprofile}

work=$(mktemp -d /tmp/gprofile-bench.XXXXXX)
harness_pid=""
old_bpf_stats=$(sysctl -n kernel.bpf_stats_enabled)

cleanup() {
	local rc=$?
	if [ -n "$harness_pid" ] && kill -0 "$harness_pid" 2>/dev/null; then
		kill -TERM "$harness_pid" 2>/dev/null || true
		wait "$harness_pid" 2>/dev/null || true
	fi
	sysctl -qw kernel.bpf_stats_enabled="$old_bpf_stats" || true
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

note() { printf 'bench: %s\n' "$*" >&2; }

# Profilers that are missing are skipped, with the reason in the report.
skip=""
skip_cfg() {
	note "skipping $1: $2"
	skip="$skip$1=$2;"
}
skip_list=${BENCH_SKIP:-}
for c in ${skip_list//,/ }; do
	skip_cfg "$c" "BENCH_SKIP"
done
command -v perf >/dev/null || skip_cfg perf "perf not installed (bench/setup.sh)"
command -v bpftrace >/dev/null || skip_cfg bpftrace "bpftrace not installed (bench/setup.sh)"
if ! command -v profile-bpfcc >/dev/null; then
	skip_cfg bcc "profile-bpfcc not installed (bench/setup.sh)"
elif [ -z "${BCC_KERNEL_SOURCE:-}" ] && [ ! -e "/lib/modules/$(uname -r)/build" ] &&
	[ ! -e /sys/kernel/kheaders.tar.xz ]; then
	# No headers for the running kernel: give BCC the distribution's
	# (Debian splits them in -common and -ARCH; BCC wants one tree).
	common=$(find /usr/src -maxdepth 1 -name 'linux-headers-*-common' | sort -V | tail -n 1)
	arch=${common%-common}-$(dpkg --print-architecture 2>/dev/null || echo amd64)
	if [ -n "$common" ] && [ -d "$arch" ]; then
		cp -rs "$common" "$work/kheaders"
		cp -rsf "$arch/." "$work/kheaders/"
		export BCC_KERNEL_SOURCE=$work/kheaders
		note "no headers for kernel $(uname -r); BCC uses $(basename "$arch")"
	else
		skip_cfg bcc "no kernel headers (bench/setup.sh)"
	fi
fi

note "building the workload, the floor program and the harness"
cc -O2 -g -fno-omit-frame-pointer -pthread -o "$work/workload" bench/workload.c
go build -o "$work/floor" ./bench/floor
go build -o "$work/harness" ./bench/harness
go build -o "$work/ringbuf" ./bench/ringbuf
server_cmds=""
if [ "$server" = 1 ]; then
	# Each neighbour keeps 15 % of one CPU busy for the whole matrix.
	go build -o "$work/server-go" ./bench/server/goserver
	c++ -O2 -g -o "$work/server-cxx" bench/server/server.cpp
	python=${BENCH_PYTHON:-}
	if [ -z "$python" ]; then
		python=$(command -v python3)
		# pyenv puts shell-script shims first on PATH: ask it for the binary.
		for p in $(pyenv which python3.11 2>/dev/null) $(type -ap python3.11 python3); do
			if ldd "$p" 2>/dev/null | grep -q libpython; then
				python=$p
				break
			fi
		done
	fi
	cp bench/server/server.py "$work/server.py"
	server_cmds="$python $work/server.py 0.15 36000;$work/server-go -duty 0.15 -d 36000;$work/server-cxx 0.15 36000"
fi
if [ ! -x "$gprofile" ]; then
	note "building gprofile"
	make build
fi
# Measure one binary throughout, even if bin/gprofile is rebuilt meanwhile.
cp "$gprofile" "$work/gprofile"
gprofile=$work/gprofile
# The revision the binary was built from (its Go build info), which is
# not the checkout's when GPROFILE names another build.
version=$(go version -m "$gprofile" 2>/dev/null | awk '$1 == "build" && $2 ~ /^vcs\.revision=/ { r = substr($2, 14, 7) } $2 == "vcs.modified=true" { d = "-dirty" } END { if (r != "") print r d }')
[ -n "$version" ] || version="$(git describe --always --dirty 2>/dev/null || echo unknown) (the checkout's: the binary has no VCS build info)"

sysctl -qw kernel.bpf_stats_enabled=1

# What this machine charges for system calls, page faults, short sleeps
# and thread wake-ups: a VM that traps them moves gprofile's cost
# against perf's (BENCHMARKS.md).
kcost=""
if cc -O2 -pthread -o "$work/kcost" bench/kcost/kcost.c; then
	kcost=$("$work/kcost") || kcost=""
fi

stamp=$(date +%Y-%m-%d-%H%M)
mkdir -p bench/results
out=bench/results/$stamp.md

ringbuf_md=""
if [ "$ringbuf" = 1 ]; then
	note "ring buffer throughput test"
	ringbuf_md=$work/ringbuf.md
	"$work/ringbuf" -workload "$work/workload" -o "$ringbuf_md" &
	harness_pid=$!
	wait "$harness_pid" || { note "ring buffer test failed"; ringbuf_md=""; }
	harness_pid=""
fi

note "running the matrix: $freqs Hz, $reps rounds of ${seconds}s; see progress below"
"$work/harness" -workload "$work/workload" -floor "$work/floor" -gprofile "$gprofile" \
	-gprofile-version "$version" -kcost "$kcost" -freqs "$freqs" -reps "$reps" -seconds "$seconds" \
	-short "$short" -server "$server_cmds" \
	-capture-reps "$capture_reps" -long "$long" -skip "$skip" -ringbuf "$ringbuf_md" \
	-work "$work/runs" -o "$out" -csv "${out%.md}.csv" &
harness_pid=$!
wait "$harness_pid"
harness_pid=""

cat "$out"
note "wrote $out and ${out%.md}.csv"
