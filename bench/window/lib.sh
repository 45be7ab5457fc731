# bench/window/lib.sh: what sweep.sh and tops.sh share; source it.

# build_workloads SRC DIR: builds the workloads of testdata SRC into DIR,
# without frame pointers: chain (C), qsort (a libc comparator), recurse
# (300 deep), thread (pthread), chainrs (Rust), gowork (Go).
build_workloads() {
	local src=$1 dir=$2
	export PATH=$PATH:/usr/local/go/bin:$HOME/.cargo/bin
	gcc -O2 -g -fomit-frame-pointer -o "$dir/chain" "$src/chain.c"
	gcc -O2 -g -fomit-frame-pointer -o "$dir/qsort" "$src/dwarf/qsort.c"
	gcc -O2 -g -fomit-frame-pointer -o "$dir/recurse" "$src/dwarf/recurse.c"
	gcc -O2 -g -fomit-frame-pointer -pthread -o "$dir/thread" "$src/dwarf/thread.c"
	rustc -O -g -C force-frame-pointers=no --crate-name chainrs -o "$dir/chainrs" "$src/dwarf/chain.rs"
	go build -o "$dir/gowork" "$src/sym/gowork.go"
}

# prog_stats PID: "run_time_ns run_cnt" summed over PID's perf_event
# programs (kernel.bpf_stats_enabled=1).
prog_stats() {
	local ns=0 cnt=0 f info t c
	# Each fdinfo is read once: a file gprofile opens and closes meanwhile
	# may take a program's fd number between two reads.
	for f in /proc/"$1"/fdinfo/*; do
		info=$(cat "$f" 2>/dev/null) || continue
		grep -q '^prog_type:[[:space:]]*7$' <<<"$info" || continue
		t=$(awk '/^run_time_ns:/ {print $2}' <<<"$info")
		c=$(awk '/^run_cnt:/ {print $2}' <<<"$info")
		ns=$((ns + ${t:-0}))
		cnt=$((cnt + ${c:-0}))
	done
	echo "$ns $cnt"
}
