// Package textscan holds the few helpers that the line-based /proc and
// kallsyms parsers share: hex fields without allocation, and whole
// reads in large chunks; and the uvarint reader of the cache files'
// decoders.
package textscan
