#!/usr/bin/env bash
# Build the real servers that internal/push's tests push to: Parca (one Go
# module) and an OpenTelemetry Collector made by the collector's builder from
# the OTLP receiver and the file and debug exporters. Each is built once,
# keyed by version, into the cache (GPROFILE_CI_CACHE, default
# /var/cache/gprofile-ci), outside the checkout:
#
#   $CACHE/parca-$PARCA_VERSION/parca       $CACHE/bin/parca   -> it
#   $CACHE/otelcol-$OTELCOL_VERSION-CONFIGHASH/otelcol $CACHE/bin/otelcol -> it
#
# The tests find them through GPROFILE_PARCA and GPROFILE_OTELCOL, else
# through $CACHE/bin (internal/testutil.TestServer). Both are built in a
# scratch module with go get + go build: go install of either is refused
# here (the go command asks the module proxy for a version list, which it
# refuses). A cold build takes minutes on two cores; a warm one nothing.
set -euo pipefail
export PATH="$PATH:/usr/local/go/bin"

CACHE="${GPROFILE_CI_CACHE:-/var/cache/gprofile-ci}"
PARCA_VERSION=v0.28.0
# The collector's core modules (receiver, exporter, builder) are v0.X; its
# stable modules (confmap providers) are v1.(X-94); contrib follows core.
OTELCOL_VERSION=0.161.0
OTELCOL_STABLE=1.67.0

mkdir -p "$CACHE/bin"

# scratch makes an empty module in a new temporary directory and prints it.
scratch() {
	local d
	d="$(mktemp -d "${TMPDIR:-/tmp}/gprofile-$1.XXXXXX")"
	(cd "$d" && go mod init scratch >/dev/null 2>&1)
	echo "$d"
}

build_parca() {
	local out="$CACHE/parca-$PARCA_VERSION/parca"
	if [ ! -x "$out" ]; then
		echo "build-test-servers: building Parca $PARCA_VERSION into $out (minutes on a cold cache)"
		local d start=$SECONDS
		d="$(scratch parca)"
		(cd "$d" &&
			go get "github.com/parca-dev/parca/cmd/parca@$PARCA_VERSION" 2>&1 | tail -n 3 &&
			mkdir -p "$(dirname "$out")" &&
			nice -n 10 go build -o "$out.tmp" github.com/parca-dev/parca/cmd/parca &&
			mv "$out.tmp" "$out")
		rm -rf "$d"
		echo "build-test-servers: Parca built in $((SECONDS - start)) s"
	fi
	ln -sfn "$out" "$CACHE/bin/parca"
}

# otelcol_config prints the builder's configuration, the distribution
# going to $1. The default URI scheme is file (the builder's default, env,
# needs the env provider, which is not built in).
otelcol_config() {
	cat <<-EOF
		dist:
		  name: otelcol
		  description: OTLP receiver with file and debug exporters, for gprofile's push tests
		  module: github.com/gprofile/gprofile/otelcol
		  output_path: $1
		  version: $OTELCOL_VERSION
		conf_resolver:
		  default_uri_scheme: file
		receivers:
		  - gomod: go.opentelemetry.io/collector/receiver/otlpreceiver v$OTELCOL_VERSION
		exporters:
		  - gomod: go.opentelemetry.io/collector/exporter/debugexporter v$OTELCOL_VERSION
		  - gomod: github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter v$OTELCOL_VERSION
		providers:
		  - gomod: go.opentelemetry.io/collector/confmap/provider/fileprovider v$OTELCOL_STABLE
	EOF
}

build_otelcol() {
	# The cache is keyed by the version and the builder configuration.
	local key
	key="$(otelcol_config dist | sha256sum | cut -c1-8)"
	local out="$CACHE/otelcol-$OTELCOL_VERSION-$key/otelcol"
	if [ ! -x "$out" ]; then
		echo "build-test-servers: building the OpenTelemetry Collector $OTELCOL_VERSION into $out (minutes on a cold cache)"
		local d start=$SECONDS
		d="$(scratch otelcol)"
		otelcol_config "$d/dist" >"$d/builder-config.yaml"
		(cd "$d" &&
			go get "go.opentelemetry.io/collector/cmd/builder@v$OTELCOL_VERSION" 2>&1 | tail -n 3 &&
			go build -o builder go.opentelemetry.io/collector/cmd/builder &&
			{ nice -n 10 ./builder --config=builder-config.yaml >builder.log 2>&1 || { tail -n 30 builder.log; exit 1; }; } &&
			mkdir -p "$(dirname "$out")" &&
			mv dist/otelcol "$out")
		rm -rf "$d"
		echo "build-test-servers: collector built in $((SECONDS - start)) s"
	fi
	ln -sfn "$out" "$CACHE/bin/otelcol"
}

case "${1:-all}" in
parca) build_parca ;;
otelcol) build_otelcol ;;
all) build_parca && build_otelcol ;;
*)
	echo "usage: $0 [parca|otelcol|all]" >&2
	exit 2
	;;
esac
echo "build-test-servers: GPROFILE_PARCA=$CACHE/bin/parca GPROFILE_OTELCOL=$CACHE/bin/otelcol"
