package demangle

import (
	"debug/elf"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gprofile/gprofile/internal/testutil"
	"github.com/ianlancetaylor/demangle"
)

func TestDemangleName(t *testing.T) {
	for _, tt := range []struct{ raw, want string }{
		{"main", "main"},
		{"runtime.mallocgc", "runtime.mallocgc"},
		{"_start", "_start"},
		{"_rt0_amd64_linux", "_rt0_amd64_linux"},
		{"_Return_not_mangled", "_Return_not_mangled"},
		{"_ZN2ns7mangledEi", "ns::mangled(int)"},
		{"_ZNSt6vectorIiSaIiEE9push_backERKi", "std::vector<int, std::allocator<int> >::push_back(int const&)"},
		{"_ZZ4mainENKUliE_clEi", "main::{lambda(int)#1}::operator()(int) const"},
		{"_ZN3foo3barEv.cold", "foo::bar()"},
		{"_ZN3foo3barEv.isra.0", "foo::bar()"},
		// Rust legacy: the hash goes, with or without an LLVM suffix,
		// and also when demangle reads it as C++ (few distinct digits).
		{"_ZN4core3fmt5write17h0123456789abcdefE", "core::fmt::write"},
		{"_ZN4core3fmt5write17h0123456789abcdefE.llvm.1234", "core::fmt::write"},
		{"_ZN4core3fmt5write17h0000000000000000E", "core::fmt::write"},
		{"_ZN4rust9hot_inner17h1111111122222222E", "rust::hot_inner"},
		{"_ZN66_$LT$alloc..vec..Vec$LT$T$GT$$u20$as$u20$core..ops..drop..Drop$GT$4drop17h5f2c7ab25a6d8e01E",
			"<alloc::vec::Vec<T> as core::ops::drop::Drop>::drop"},
		// Rust v0: no hash to begin with; the crate disambiguator goes.
		{"_RNvCs1234_7mycrate3foo", "mycrate::foo"},
		{"_RNvMNtCs5qgTnsjb0Mb_4rust3fooNtB2_3Foo3bar", "<rust::foo::Foo>::bar"},
		{"_RNvCs1234_7mycrate3foo.llvm.77", "mycrate::foo"},
		// Not demanglable: kept as is.
		{"_ZZZ", "_ZZZ"},
		{"_R", "_R"},
	} {
		if got := Name(tt.raw); got != tt.want {
			t.Errorf("demangleName(%q) = %q, want %q", tt.raw, got, tt.want)
		}
	}
}

func TestShortName(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"ns::mangled(int)", "ns::mangled"},
		{"std::vector<int, std::allocator<int> >::push_back(int const&)", "std::vector<int, std::allocator<int> >::push_back"},
		{"main::{lambda(int)#1}::operator()(int) const", "main::{lambda(int)#1}::operator()"},
		{"void f<int>(int)", "f<int>"},
		{"A::operator int() const", "A::operator int"},
		{"A::operator char const*() const", "A::operator char const*"},
		{"A::operator()()", "A::operator()"},
		{"A::operator<(A const&) const", "A::operator<"},
		{"A::operator<<=(int)", "A::operator<<="},
		{"A::operator->() const", "A::operator->"},
		{"A::operator new(unsigned long)", "A::operator new"},
		{"operator delete[](void*)", "operator delete[]"},
		{"bool std::operator< <char, std::char_traits<char> >(char const&, char const&)", "std::operator< <char, std::char_traits<char> >"},
		{"(anonymous namespace)::foo()", "(anonymous namespace)::foo"},
		{"A::foo[abi:cxx11]()", "A::foo[abi:cxx11]"},
		{"A::f() const &", "A::f"},
		{"A::f() &&", "A::f"},
		{"std::function<void (int)>::operator()(int) const", "std::function<void (int)>::operator()"},
		{"std::enable_if<true, void>::type ns::g<long>(long)", "ns::g<long>"},
		{"foo(int)::Local::method(double)", "foo(int)::Local::method"},
		{"virtual thunk to std::basic_ostream<char>::~basic_ostream()", "virtual thunk to std::basic_ostream<char>::~basic_ostream"},
		{"transaction clone for std::logic_error::logic_error(char const*)", "transaction clone for std::logic_error::logic_error"},
		// Unchanged: no parameter list, or not C++.
		{"operator()", "operator()"},
		{"A::operator()", "A::operator()"},
		{"main", "main"},
		{"main.(*T).Run", "main.(*T).Run"},
		{"main.main.func1", "main.main.func1"},
		{"<alloc::vec::Vec<T> as core::ops::drop::Drop>::drop", "<alloc::vec::Vec<T> as core::ops::drop::Drop>::drop"},
		{"mycrate::run::{closure#0}", "mycrate::run::{closure#0}"},
		{"JS:*hot file:///tmp/hot.js:3:13", "JS:*hot file:///tmp/hot.js:3:13"},
		{"LazyCompile:~<anonymous> /tmp/x.js:1", "LazyCompile:~<anonymous> /tmp/x.js:1"},
		{"RegExp:(a|b)", "RegExp:(a|b)"},
		{"(a|b)", "(a|b)"},
		{"f(", "f("},
		{"f)", "f)"},
		{"f(a))", "f(a))"},
		{"", ""},
		{")", ")"},
		{" const", " const"},
	} {
		if got := ShortName(tt.in); got != tt.want {
			t.Errorf("ShortName(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestShortNameMatchesNoParams checks ShortName against demangle's own
// NoParams output on every C++ function symbol of the system's C++
// libraries: ShortName(demangled) must equal the name demangled without
// parameters.
func TestShortNameMatchesNoParams(t *testing.T) {
	var libs []string
	for _, pattern := range []string{"/usr/lib/*-linux-gnu/libstdc++.so.6", "/usr/lib/*-linux-gnu/libLLVM-1*.so.1", "/usr/lib/*-linux-gnu/libicuuc.so.*"} {
		m, _ := filepath.Glob(pattern)
		for _, lib := range m {
			if real, err := filepath.EvalSymlinks(lib); err == nil && !slices.Contains(libs, real) {
				libs = append(libs, real)
				break // one of each is plenty
			}
		}
	}
	if len(libs) == 0 {
		testutil.Skipf(t, "no C++ library (libstdc++.so.6) found")
	}
	checked, differ := 0, 0
	for _, lib := range libs {
		f, err := elf.Open(lib)
		if err != nil {
			continue
		}
		syms, _ := f.DynamicSymbols()
		f.Close()
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) != elf.STT_FUNC || !strings.HasPrefix(s.Name, "_Z") {
				continue
			}
			full := Name(s.Name)
			want, err := demangle.ToString(s.Name, demangle.NoParams, demangle.NoClones)
			if err != nil || full == s.Name || strings.Contains(want, " for ") || strings.Contains(want, " to ") {
				continue // thunks and clones: NoParams keeps them whole
			}
			checked++
			if got := ShortName(full); got != want {
				if differ++; differ <= 20 {
					t.Errorf("ShortName(%q) = %q; NoParams gives %q (%s)", full, got, want, s.Name)
				}
			}
		}
	}
	t.Logf("checked %d C++ names in %v, %d differ", checked, libs, differ)
	if checked < 1000 {
		t.Errorf("only %d C++ names checked", checked)
	}
}

func FuzzShortName(f *testing.F) {
	for _, s := range []string{"std::vector<int>::push_back(int const&)", "main::{lambda(int)#1}::operator()(int) const",
		"bool std::operator< <char>(char const&)", "A::operator char const*() const", "(anonymous namespace)::f()"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := ShortName(s)
		if len(got) > len(s) || !strings.Contains(s, got) {
			t.Errorf("ShortName(%q) = %q is not part of it", s, got)
		}
		if again := ShortName(got); got != s && strings.HasSuffix(s, ")") && again != got && !strings.Contains(got, "(") {
			t.Errorf("ShortName not idempotent: %q → %q → %q", s, got, again)
		}
	})
}
