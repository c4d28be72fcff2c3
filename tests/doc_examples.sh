#!/bin/sh
# doc_examples.sh COMPILER FLAGS... -- FILE.md...: every ```cpp block of the documentation that is
# a whole program (it has `int main(`) compiles with the build's flags as written, and runs
# with exit status 0. (Fragments are not programs; the examples/ programs they come from are
# built by meson.)
cmd=""
while [ "$1" != "--" ]; do cmd="$cmd '$1'"; shift; done
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0 count=0
for doc in "$@"; do
  # one file per block: $tmp/<n>.cpp, numbered in order
  awk -v dir="$tmp" -v doc="$(basename "$doc")" '
    /^```cpp$/ { n++; inblock = 1; file = sprintf("%s/%s.%d.cpp", dir, doc, n); next }
    /^```$/ { inblock = 0; next }
    inblock { print > file }' "$doc"
done
for f in "$tmp"/*.cpp; do
  [ -e "$f" ] || continue
  grep -q "int main(" "$f" || continue
  count=$((count + 1))
  name=$(basename "$f" .cpp)
  if out=$(eval "$cmd -o '$tmp/$name' '$f'" 2>&1) && "$tmp/$name" >"$tmp/$name.out" 2>&1; then
    echo "ok   $name: compiles and runs: $(head -1 "$tmp/$name.out")"
  else
    echo "FAIL: $name"; echo "$out" | head -20; cat "$tmp/$name.out" 2>/dev/null | head -5; status=1
  fi
done
[ "$count" -gt 0 ] || { echo "FAIL: no whole program found in $*"; status=1; }
exit $status
