package attach

// The BPF object of bpf/profile.bpf.c (the sampler) is generated and
// committed (profile_x86_bpfel.go and profile_x86_bpfel.o) so that go
// build needs no clang; the kernel-symbol programs are
// internal/symbolize/ksym's. The object is x86-64's (-target amd64, and
// the build tag bpf2go derives from it): it reads struct pt_regs, cs and
// the user registers, as x86-64 lays them out (bpf/include/asm).
// Regenerate with `make generate` (clang; the headers are in
// bpf/include); `make check-generated` fails when the committed files
// differ from the source.
//
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -nostdinc -I../../bpf/include" -target amd64 -type sample profile ../../bpf/profile.bpf.c
//
// bpf/follow.bpf.c (fork following without tracefs, followForksRaw) is
// generated the same way (follow_bpfel.go and follow_bpfel.o).
//
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -nostdinc -I../../bpf/include" -target bpfel follow ../../bpf/follow.bpf.c
//
// bpf/offcpu.bpf.c (--off-cpu: the switch-out, switch-in and stop-pass
// programs, OffCPU) is generated the same way, for x86-64 (it reads the
// user registers from pt_regs), as offcpu_x86_bpfel.go and .o.
//
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -nostdinc -I../../bpf/include" -target amd64 -type sample offcpu ../../bpf/offcpu.bpf.c
