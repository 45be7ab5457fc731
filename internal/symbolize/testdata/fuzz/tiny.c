// tiny.c is the source of tiny.elf, the seed of the ELF and DWARF fuzz
// targets (see README).
static inline __attribute__((always_inline)) int sq(int x) { return x * x; }
__attribute__((noinline)) int f(int x) { return sq(x) + 1; }
void _start(void) { for (;;) f(3); }
