// Package push delivers interval profiles to a profiling backend over
// HTTP: Grafana Pyroscope (its /ingest and Connect push APIs), Parca
// (ProfileStoreService.WriteRaw) and OpenTelemetry OTLP profiles (alpha).
//
// [Open] picks a [Backend] by the URL's scheme; a Backend sends one
// [Profile] (one interval of one service, a gzipped pprof) and says by
// [ErrPermanent] whether a failure is worth retrying. It needs nothing
// from the kernel and no privileges; docs/architecture.md (Continuous
// profiling) describes the delivery loop around it.
package push
