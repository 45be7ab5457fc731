package attach

// The BPF objects are generated from bpf/profile.bpf.c (the sampler),
// bpf/ksym.bpf.c (the kallsyms iterator, OpenKallsymsIter) and
// bpf/ksymlookup.bpf.c (OpenKernelSymbolLookup) and committed
// (<name>_bpfel.go and <name>_bpfel.o for each) so that go build needs
// no clang. Regenerate with `make generate` (clang and
// libbpf-dev); `make check-generated` fails when the committed files
// differ from the source.
//
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -type sample profile ../../bpf/profile.bpf.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel ksym ../../bpf/ksym.bpf.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel ksymlookup ../../bpf/ksymlookup.bpf.c
