# gprofile: build, run, test. `make run` profiles the whole system for 10 s
# and prints the top functions; `make test` runs every test (as root the
# privileged ones run for real; otherwise they skip and say why).
GO      ?= go
BIN     := bin/gprofile
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PROFILE ?= gprofile.pb.gz
RUN_SECONDS ?= 10

FUZZTIME     ?= 30s
SOAK_SECONDS ?= 600

.PHONY: all build run test generate check-generated lint check-layers fuzz soak bench clean

all: build

# A static binary (CGO_ENABLED=0: the net package's pure-Go resolver):
# no libc or dynamic loader mapped beside it, less RSS
# (BENCHMARKS.md, issue 16 session 13), and it runs on any distribution.
build:
	CGO_ENABLED=0 $(GO) build -o $(BIN) ./cmd/gprofile

# gprofile prints the top functions itself (go tool pprof -top $(PROFILE)
# shows more).
run: build
	$(SUDO) $(BIN) -f 99 -d $(RUN_SECONDS) -o $(PROFILE)

# Privileged tests need root; with GPROFILE_REQUIRE_PRIV=1 (CI) they fail
# instead of skipping. -p 1: some tests change machine-wide settings
# (kernel.kptr_restrict) that other packages' tests would see.
test:
	$(GO) test -count=1 -p 1 ./...

# Runs every fuzz target (func FuzzXxx) for FUZZTIME each; a failing input
# is saved under the package's testdata/fuzz/ and fails the run.
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

# Whole-system profile for SOAK_SECONDS at 999 Hz under process churn;
# fails when gprofile's RSS, fds or threads grow without bound (bench/SOAK.md).
soak: build
	$(SUDO) env GO=$$(command -v $(GO)) SOAK_SECONDS=$(SOAK_SECONDS) bench/soak.sh

# Regenerates every BPF object and its Go bindings with bpf2go (needs
# clang; the headers the programs include are in bpf/include).
generate:
	$(GO) generate ./...

# Fails when the committed BPF objects and bindings differ from what the
# sources build, or when a generated file is new or gone.
check-generated: generate
	@out=$$(git status --porcelain -- '*_bpfel.go' '*_bpfel.o' '*_bpfeb.go' '*_bpfeb.o'); \
	if [ -n "$$out" ]; then echo "generated BPF files differ from bpf/*.bpf.c (run make generate, commit):"; echo "$$out"; exit 1; fi

lint: check-layers
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt wants to rewrite: $$out"; exit 1; fi
	$(GO) vet ./...

# The layering (docs/architecture.md): sampling (attach) and symbols
# (symbolize/..., ksym) never import each other; format packages never
# import the facade or the object-file layer. The rules are listed in
# scripts/check-layers.sh.
check-layers:
	@GO=$(GO) scripts/check-layers.sh

# Side-by-side benchmark with perf, bpftrace and BCC (bench/setup.sh installs
# them); writes bench/results/DATE.md. 8-10 minutes on a quiet 2-CPU
# machine, up to 16 when other jobs hold the CPUs (BENCHMARKS.md).
bench: build
	$(SUDO) bench/run.sh

clean:
	rm -rf bin
