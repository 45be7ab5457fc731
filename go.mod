module github.com/gprofile/gprofile

go 1.26.8

require (
	github.com/cilium/ebpf v0.22.0
	github.com/go-delve/delve v1.27.2
	github.com/google/pprof v0.0.0-20260906184651-6331bc6350fe
	github.com/ianlancetaylor/demangle v0.0.0-20260724033716-83e58baca724
	github.com/klauspost/compress v1.20.3
	github.com/ulikunitz/xz v0.5.17
	go.opentelemetry.io/proto/slim/otlp v1.11.0
	go.opentelemetry.io/proto/slim/otlp/collector/profiles/v1development v0.4.0
	go.opentelemetry.io/proto/slim/otlp/profiles/v1development v0.4.0
	golang.org/x/sys v0.49.0
	google.golang.org/protobuf v1.36.11
)

require golang.org/x/sync v0.24.0 // indirect

tool github.com/cilium/ebpf/cmd/bpf2go
