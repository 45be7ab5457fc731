#!/bin/sh
# compare-dwarf.sh: every whole-stack workload (cmd/gprofile/testdata)
# profiled by gprofile and by perf record --call-graph dwarf, side by
# side: the share of each workload's samples that hold its whole chain.
# Run as root from anywhere; needs gcc, g++, rustc, go and perf. Extra
# arguments go to gprofile (default: --call-graph dwarf).
#   scripts/compare-dwarf.sh                 gprofile --call-graph dwarf vs perf
#   scripts/compare-dwarf.sh --call-graph fp  the frame-pointer walk vs perf
set -eu
cd "$(dirname "$0")/.."
GO=${GO:-go}
$GO build -o bin/gprofile ./cmd/gprofile
[ $# -gt 0 ] || set -- --call-graph dwarf
exec $GO run ./bench/dwarfcmp -gprofile bin/gprofile -secs "${SECS:-3}" -- "$@"
