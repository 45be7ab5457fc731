// Package kallsyms parses the kernel's symbol table into a [Table] that
// names kernel addresses: the text of /proc/kallsyms ([Load], [Parse])
// or the binary records of the BPF kallsyms iterator ([ParseIter]), and
// the module list of /proc/modules ([Table.LoadModules]).
//
// # Spec
//
// The kernel's kernel/kallsyms.c (s_show: "%px %c %s\t[%s]"), and
// proc(5) for /proc/modules.
package kallsyms
