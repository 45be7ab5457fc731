// Package pushtest starts, for tests, the real servers that package push
// sends to (Parca, and an OpenTelemetry Collector whose file exporter
// writes what arrives) and reads back what they stored: Parca through its
// query API (parca.query.v1alpha1 over its HTTP gateway), the collector
// through its file exporter's output (OTLP ProfilesData, length-prefixed
// protobuf). The binaries come from scripts/build-test-servers.sh
// (testutil.TestServer).
package pushtest
