#!/usr/bin/env bash
# Run every Go fuzz target (func FuzzXxx(*testing.F)) in the packages given
# (default ./...) for FUZZTIME each (default 30s; any -fuzztime value, such
# as 5s or 10000x). Targets run one at a time, each with its own seed
# corpus (testdata/fuzz/FuzzXxx) and the cached corpus in $(go env GOCACHE).
#
#   scripts/fuzz.sh                        # every target, 30 s each
#   FUZZTIME=5s scripts/fuzz.sh            # CI
#   scripts/fuzz.sh ./internal/symbolize   # one package's targets
#
# Exits 1 when any target finds a failing input (go test writes it to the
# package's testdata/fuzz/FuzzXxx/; fix the bug and commit the file as a
# regression seed) or when no target is found; runs the other targets
# first either way.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-30s}
[ $# -gt 0 ] || set -- ./...

# `go test -list` prints each package's matching names, then its
# "ok  <import path>" line.
if ! list=$($GO test -list '^Fuzz' "$@"); then
	echo "$list" >&2
	echo "fuzz: go test -list failed" >&2
	exit 1
fi
targets=()
names=()
while read -r first second _; do
	case "$first" in
	Fuzz*) names+=("$first") ;;
	ok)
		for n in "${names[@]}"; do targets+=("$second $n"); done
		names=()
		;;
	esac
done <<<"$list"
if [ ${#targets[@]} = 0 ]; then
	echo "fuzz: no fuzz targets in $*" >&2
	exit 1
fi

# corpus lists the inputs saved for target $2 of package $1.
corpus() {
	local dir
	dir=$($GO list -f '{{.Dir}}' "$1")/testdata/fuzz/$2
	ls "$dir" 2>/dev/null || true
}

echo "fuzz: ${#targets[@]} targets, $FUZZTIME each"
failed=()
for t in "${targets[@]}"; do
	pkg=${t% *}
	name=${t#* }
	echo "fuzz: $name ($pkg)"
	# Go 1.26's fuzz coordinator can fail a target with a bare "context
	# deadline exceeded" when -fuzztime ends while a worker is busy
	# (go.dev/issue/75804, fixed in Go 1.27): no input is written then.
	# It hit about one target run in twenty here. Such a run is tried
	# again, up to three runs in all; a written input, another failure,
	# or three races in a row fail the target.
	for try in 1 2 3; do
		before=$(corpus "$pkg" "$name")
		if out=$($GO test -run '^$' -fuzz "^$name\$" -fuzztime "$FUZZTIME" "$pkg" 2>&1); then
			echo "$out"
			break
		fi
		echo "$out"
		if [ "$try" -lt 3 ] && [ "$(corpus "$pkg" "$name")" = "$before" ] &&
			grep -q '^    context deadline exceeded$' <<<"$out" && ! grep -q 'Failing input written' <<<"$out"; then
			echo "fuzz: $name: the coordinator's deadline race (go.dev/issue/75804), no input written; running it again"
			continue
		fi
		failed+=("$name ($pkg)")
		break
	done
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "fuzz: FAIL: ${failed[*]}; failing inputs are under each package's testdata/fuzz/" >&2
	exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran $FUZZTIME without a failure"
