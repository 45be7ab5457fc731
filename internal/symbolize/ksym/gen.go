package ksym

// The BPF objects of bpf/ksym.bpf.c (the kallsyms iterator, [OpenIter])
// and bpf/ksymlookup.bpf.c ([OpenLookup]) are generated with bpf2go and
// committed (<name>_bpfel.go and <name>_bpfel.o) so that go build needs no
// clang; the record and batch layouts come from the generated types
// (-type), not from constants written again here. The programs read no
// architecture's registers, so they are built for any little-endian
// target. Regenerate with `make generate` (needs clang; the headers are
// in bpf/include); `make check-generated` fails when the committed files
// differ from the source.
//
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -nostdinc -I../../../bpf/include" -target bpfel ksym ../../../bpf/ksym.bpf.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -nostdinc -I../../../bpf/include" -target bpfel ksymlookup ../../../bpf/ksymlookup.bpf.c
