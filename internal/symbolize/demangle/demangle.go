package demangle

import (
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// Name returns the display name of a symbol-table or DWARF
// linkage name: C++ (Itanium ABI, _Z), Rust legacy (_ZN…17h<hash>E) and
// Rust v0 (_R) names demangled, without clone suffixes (".cold",
// ".isra.0", ".llvm.123") and without the hash of Rust legacy names; C++
// parameter lists are kept (ShortName removes them). Names that are not
// mangled, or that do not demangle, come back as they are.
func Name(raw string) string {
	if !maybeMangled(raw) {
		return raw
	}
	s := demangle.Filter(raw, demangle.NoClones)
	if s == raw {
		return raw
	}
	if isRustLegacy(raw) {
		// demangle drops the hash itself, except when it has fewer than
		// five distinct hex digits and the name is read as C++ instead.
		s = trimRustHash(s)
	}
	return s
}

// Mangled reports whether Name may change name: whether it has the
// prefix of a mangled C++ or Rust name (_Z, _R).
func Mangled(name string) bool { return maybeMangled(name) }

// maybeMangled reports whether name may be a mangled C++ or Rust name.
func maybeMangled(name string) bool {
	return len(name) > 2 && name[0] == '_' && (name[1] == 'Z' || name[1] == 'R')
}

// isRustLegacy reports whether raw has the shape of a Rust legacy name:
// _ZN, path components, then "17h", 16 hex digits and "E", with an
// optional ".suffix".
func isRustLegacy(raw string) bool {
	if !strings.HasPrefix(raw, "_ZN") {
		return false
	}
	if i := strings.Index(raw, "E."); i > 0 {
		raw = raw[:i+1]
	}
	n := len(raw)
	return n > 23 && raw[n-1] == 'E' && raw[n-20:n-17] == "17h" && isHex(raw[n-17:n-1])
}

// trimRustHash removes a trailing "::h" and 16 hex digits.
func trimRustHash(s string) string {
	n := len(s)
	if n > 19 && s[n-19:n-16] == "::h" && isHex(s[n-16:]) {
		return s[:n-19]
	}
	return s
}

// isHex reports whether s is made of lower-case hex digits only.
func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// ShortName returns a demangled C++ function name without its parameter
// list, the cv- and ref-qualifiers after it (const, volatile, &, &&,
// noexcept), and the return type that template functions carry; the
// prefixes of compiler-made functions ("virtual thunk to ",
// "transaction clone for "…) stay:
//
//	std::vector<int, std::allocator<int> >::push_back(int const&)  →  std::vector<int, std::allocator<int> >::push_back
//	main::{lambda(int)#1}::operator()(int) const                  →  main::{lambda(int)#1}::operator()
//	void ns::f<int>(int)                                          →  ns::f<int>
//	bool std::operator< <char>(char const&, char const&)          →  std::operator< <char>
//
// It is what demangle's NoParams option makes of the mangled name, for
// use on Frame.Function where folded stacks want short names. Operator
// names (operator(), operator<, operator->…), lambdas ({lambda(int)#1}),
// templates and "(anonymous namespace)" are kept intact. Every other name
// comes back unchanged: C, Go ("main.(*T).Run"), Rust, kernel and JIT
// names (a trailing parenthesized group counts as a parameter list only
// when it follows an identifier, '>', ']' or an operator name).
func ShortName(function string) string {
	for _, p := range specialPrefixes {
		if rest, ok := strings.CutPrefix(function, p); ok {
			return p + ShortName(rest)
		}
	}
	end := trimQualifiers(function)
	if end == 0 || function[end-1] != ')' {
		return function
	}
	sc := nameScan{s: function[:end], retSpace: -1, group: -1}
	if !sc.scan() || sc.groupEnd != end-1 || sc.group <= 0 || !sc.canPrecede {
		return function
	}
	name := function[:sc.group]
	if sc.retSpace >= 0 && sc.retSpace < sc.group {
		name = name[sc.retSpace+1:]
	}
	return name
}

// specialPrefixes start the demangled names of functions the compiler
// makes for another one: ShortName keeps them and shortens the rest.
var specialPrefixes = []string{
	"virtual thunk to ", "non-virtual thunk to ", "covariant return thunk to ",
	"transaction clone for ", "TLS init function for ", "TLS wrapper function for ",
}

// cxxQualifiers are the words a demangled function type may end with,
// after its parameter list.
var cxxQualifiers = []string{" const", " volatile", " &&", " &", " noexcept", " restrict", " transaction_safe"}

// trimQualifiers returns the length of s without its trailing
// qualifiers.
func trimQualifiers(s string) int {
	for {
		trimmed := false
		for _, q := range cxxQualifiers {
			if strings.HasSuffix(s, q) {
				s, trimmed = s[:len(s)-len(q)], true
			}
		}
		if !trimmed {
			return len(s)
		}
	}
}

// nameScan walks a demangled name left to right, tracking bracket depth
// ((), <>, [], {} alike) and skipping operator names.
type nameScan struct {
	s          string
	depth      int
	group      int  // start of the last top-level "(" group
	groupEnd   int  // its closing ")"
	canPrecede bool // what precedes group may end a function name
	retSpace   int  // last top-level space before any operator name
	sawOp      bool // an operator name was seen at top level
}

// operatorTokens are the symbolic C++ operator names, longest first so
// that "operator<<=" is not read as "operator<".
var operatorTokens = []string{
	"<=>", "<<=", ">>=", "->*", "()", "[]", "<<", ">>", "<=", ">=", "->", "==", "!=", "&&", "||",
	"++", "--", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<", ">", "+", "-", "*", "/",
	"%", "&", "|", "^", "~", "!", "=", ",",
}

// scan walks the name; it reports false when brackets do not balance.
func (sc *nameScan) scan() bool {
	s := sc.s
	afterOp := false // just past a symbolic operator name
	for i := 0; i < len(s); {
		if isOperatorAt(s, i) {
			i += len("operator")
			if sc.depth == 0 {
				sc.sawOp = true
			}
			for _, tok := range operatorTokens {
				if strings.HasPrefix(s[i:], tok) {
					i += len(tok)
					afterOp = true
					break
				}
			}
			continue
		}
		c := s[i]
		switch c {
		case '(', '<', '[', '{':
			if c == '(' && sc.depth == 0 {
				sc.group = i
				sc.canPrecede = afterOp || (i > 0 && (endsName(s[i-1]) || sc.sawOp && strings.IndexByte("*&)", s[i-1]) >= 0))
			}
			sc.depth++
		case ')', '>', ']', '}':
			sc.depth--
			if sc.depth < 0 {
				return false
			}
			if c == ')' && sc.depth == 0 {
				sc.groupEnd = i
			}
		case ' ':
			if sc.depth == 0 && !sc.sawOp {
				sc.retSpace = i
			}
		}
		afterOp = false
		i++
	}
	return sc.depth == 0
}

// isOperatorAt reports whether the word "operator" starts at s[i].
func isOperatorAt(s string, i int) bool {
	if !strings.HasPrefix(s[i:], "operator") {
		return false
	}
	if i > 0 && isIdentByte(s[i-1]) {
		return false
	}
	j := i + len("operator")
	return j == len(s) || !isIdentByte(s[j])
}

// endsName reports whether c may be the last byte of a function name
// before its parameter list.
func endsName(c byte) bool { return isIdentByte(c) || c == '>' || c == ']' }

// isIdentByte reports whether c may be part of a C++ identifier.
func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c >= 0x80
}
