package attach

// The BPF object of bpf/profile.bpf.c (the sampler) is generated and
// committed (profile_bpfel.go and profile_bpfel.o) so that go build needs
// no clang; the kernel-symbol programs are internal/symbolize/ksym's.
// Regenerate with `make generate` (clang and libbpf-dev); `make check-generated` fails when the committed files
// differ from the source.
//
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -type sample profile ../../bpf/profile.bpf.c
//
// bpf/follow.bpf.c (fork following without tracefs, followForksRaw) is
// generated the same way (follow_bpfel.go and follow_bpfel.o).
//
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel follow ../../bpf/follow.bpf.c
