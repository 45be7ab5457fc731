// libchain.c is a shared library that stackdump.c dlopens (mode dlopen):
// its two frames, built without frame pointers, sit between the
// program's frames and the leaf it calls back.
__attribute__((noinline)) static int lib_mid(int (*cb)(int), int n) {
	int r = cb(n + 1);
	return r * 3 + n;
}

__attribute__((noinline)) int lib_chain(int (*cb)(int), int n) {
	int r = lib_mid(cb, n * 2);
	return r + 7;
}
