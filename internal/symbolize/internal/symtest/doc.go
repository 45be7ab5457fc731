// Package symtest holds the test helpers that the symbolize packages
// share: workloads built at test time from internal/symbolize/testdata
// (C with gcc, Go with the go command), ELF facts read with debug/elf as
// an oracle independent of the code under test, and fixtures.
package symtest
