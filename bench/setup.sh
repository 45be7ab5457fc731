#!/usr/bin/env bash
# bench/setup.sh: installs what bench/run.sh compares gprofile with, on
# Debian or Ubuntu, as root: perf, bpftrace, BCC's profile tool, a C
# compiler, GNU time, and kernel headers for BCC (which compiles its BPF
# program at start-up). Safe to run again.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
	echo "bench/setup.sh: run as root" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
pkgs=(bpftrace bpfcc-tools gcc time)
command -v perf >/dev/null || pkgs+=(linux-perf)
# BCC wants the running kernel's headers. Prefer the exact package; else the
# distribution's generic one (run.sh points BCC at it: profile-bpfcc only
# uses UAPI structs, so headers of another version do).
if [ ! -e "/lib/modules/$(uname -r)/build" ] && [ ! -e /sys/kernel/kheaders.tar.xz ]; then
	if apt-cache show "linux-headers-$(uname -r)" >/dev/null 2>&1; then
		pkgs+=("linux-headers-$(uname -r)")
	else
		pkgs+=(linux-headers-amd64)
	fi
fi
apt-get install -y -qq "${pkgs[@]}"
echo "bench/setup.sh: installed ${pkgs[*]}"
