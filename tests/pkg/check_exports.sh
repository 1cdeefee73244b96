#!/usr/bin/env bash
# ctest shared_exports: the dynamic symbol table of libprezero.so defines exactly the functions
# that the public headers (every *.h under the include directory) declare with PZ_API.
# The expected list is computed from the headers here: a declaration is `PZ_API <type> name(`
# on one line. Usage: check_exports.sh LIB INCLUDE_DIR [NM]. Exit 77 (skipped) without nm.
set -euo pipefail
lib=$1 inc=$2 nm=${3:-nm}
command -v "$nm" >/dev/null 2>&1 || { echo "nm not found: skipped"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# Expected: the identifier before the first '(' of every line holding PZ_API (not the macro's own
# definition lines in prezero/common.h).
find "$inc" -name '*.h' -print0 | xargs -0 cat \
  | grep -E '^[[:space:]]*PZ_API[[:space:]]' \
  | sed -E 's/\(.*//; s/.*[^A-Za-z0-9_]([A-Za-z_][A-Za-z0-9_]*)[[:space:]]*$/\1/' \
  | sort -u >"$tmp/expected"
# Defined dynamic symbols of the library (name is the last field of nm's line).
"$nm" -D --defined-only "$lib" | awk '{print $NF}' | sed 's/@.*//' | sort -u >"$tmp/exported"

n_exp=$(wc -l <"$tmp/expected"); n_got=$(wc -l <"$tmp/exported")
echo "headers declare $n_exp PZ_API functions; $lib exports $n_got symbols"
fail=0
if [ "$n_exp" -lt 10 ]; then echo "FAIL: fewer than 10 PZ_API declarations found under $inc"; fail=1; fi
if grep -v '^pz_' "$tmp/expected" | grep -q .; then
  echo "FAIL: PZ_API declarations not named pz_*:"; grep -v '^pz_' "$tmp/expected"; fail=1
fi
extra=$(comm -13 "$tmp/expected" "$tmp/exported")
missing=$(comm -23 "$tmp/expected" "$tmp/exported")
if [ -n "$extra" ]; then echo "FAIL: exported but not public API:"; echo "$extra" | head -50; fail=1; fi
if [ -n "$missing" ]; then echo "FAIL: declared PZ_API but not exported:"; echo "$missing"; fail=1; fi
[ "$fail" = 0 ] && echo "PASS: exports == public API ($n_exp symbols)"
exit $fail
