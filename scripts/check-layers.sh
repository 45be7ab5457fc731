#!/bin/sh
# check-layers.sh: fails when a package imports, directly or not, one it
# must not (docs/architecture.md draws the layers). Each rule is
#   FROM  TO...
# under internal/: FROM's packages must not depend on any TO. "X/..." is
# X and every package below it; "X/*" only those below it.
set -eu
GO=${GO:-go}
mod=$($GO list -m)

rules='
attach                 symbolize/... ksym
symbolize/...          attach ksym
ksym                   attach symbolize
output                 attach ksym
counter                symbolize/... ksym output recorder
push                   attach symbolize/... ksym unwind recorder output
probe                  attach symbolize/... ksym output recorder counter unwind
push/pushtest          push attach symbolize/... ksym unwind recorder output
unwind                 symbolize
symbolize/*            symbolize
symbolize/srcline      symbolize/*
symbolize/elfio        symbolize/*
symbolize/demangle     symbolize/*
symbolize/dwarfline    symbolize/gopclntab symbolize/kallsyms symbolize/debuginfo/... symbolize/objfile
symbolize/gopclntab    symbolize/dwarfline symbolize/kallsyms symbolize/debuginfo/... symbolize/objfile
symbolize/kallsyms     symbolize/dwarfline symbolize/gopclntab symbolize/debuginfo/... symbolize/objfile
symbolize/debuginfo/... symbolize/dwarfline symbolize/gopclntab symbolize/kallsyms symbolize/objfile
symbolize/procmaps     symbolize/dwarfline symbolize/gopclntab symbolize/kallsyms symbolize/debuginfo/... symbolize/objfile symbolize/ksym
symbolize/perfmap      symbolize/dwarfline symbolize/gopclntab symbolize/kallsyms symbolize/debuginfo/... symbolize/objfile symbolize/ksym
'

# expand PATTERN: the import paths it names (only packages that exist).
expand() {
	case $1 in
	*/\*) $GO list "./internal/${1%/\*}/..." 2>/dev/null | grep -vx "$mod/internal/${1%/\*}" || true ;;
	*/...) $GO list "./internal/$1" 2>/dev/null || true ;;
	*) [ -d "internal/$1" ] && $GO list "./internal/$1" 2>/dev/null || true ;;
	esac
}

# matches PATH PATTERN: whether the import path is named by the pattern.
matches() {
	p=$mod/internal/${2%/\*}
	p=${p%/...}
	case $2 in
	*/\*) case $1 in "$p"/*) return 0 ;; esac ;;
	*/...) case $1 in "$p" | "$p"/*) return 0 ;; esac ;;
	*) [ "$1" = "$p" ] && return 0 ;;
	esac
	return 1
}

fail=0
echo "$rules" | while read -r from tos; do
	[ -n "$from" ] || continue
	for pkg in $(expand "$from"); do
		for dep in $($GO list -deps "$pkg" | grep "^$mod/internal/" | grep -vx "$pkg"); do
			for to in $tos; do
				if matches "$dep" "$to"; then
					echo "${pkg#$mod/} must not import ${dep#$mod/} (rule: $from -/-> $to)"
					fail=1
				fi
			done
		done
	done
	[ $fail = 0 ] || exit 1
done
