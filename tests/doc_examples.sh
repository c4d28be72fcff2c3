#!/bin/sh
# doc_examples.sh COMPILER FLAGS... -- FILE.md...: every ```cpp block of the documentation
# compiles as written, one of three ways:
#   - a whole program (it has `int main(`): compiled with the build's flags, and run in a
#     folder of its own (the files it writes are removed): exit status 0;
#   - an excerpt, marked by the line `<!-- excerpt: PATH -->` before the block (PATH from the
#     repository's root): every line of it but `...` is a line of PATH (comments and spacing
#     aside), so the program it comes from, which meson builds, compiles it;
#   - otherwise declarations: compiled after `#include <stformer/stformer.hpp>` and
#     `using namespace stformer;`, with an empty main.
# FLAGS may name .cpp sources (the safetensors reader): each is compiled once, and its object
# linked into every program.
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmd="" sources=""
while [ "$1" != "--" ]; do
  case $1 in
    *.cpp) sources="$sources $1" ;;
    *) cmd="$cmd '$1'" ;;
  esac
  shift
done
shift
objects=""
for s in $sources; do
  o="$tmp/$(basename "$s" .cpp).o"
  eval "$cmd -c '$s' -o '$o'" || { echo "FAIL: $s does not compile"; exit 1; }
  objects="$objects '$o'"
done
status=0 count=0
for doc in "$@"; do
  # one file per block: $tmp/<doc>.<n>.cpp, and <doc>.<n>.excerpt holding PATH for an excerpt
  awk -v dir="$tmp" -v doc="$(basename "$doc")" '
    /^<!-- excerpt: .* -->$/ { excerpt = $3; next }
    /^```cpp$/ { n++; inblock = 1; file = sprintf("%s/%s.%d.cpp", dir, doc, n)
                 if (excerpt != "") print excerpt > sprintf("%s/%s.%d.excerpt", dir, doc, n)
                 excerpt = ""; next }
    /^```$/ { inblock = 0; next }
    inblock { print > file; next }
    NF > 0 { excerpt = "" }' "$doc"
done
# a line without its comment, its spaces collapsed
normal() { sed -e 's|//.*$||' -e 's/[[:space:]]\{1,\}/ /g' -e 's/^ //' -e 's/ $//' "$1" | grep -v '^$'; }
for f in "$tmp"/*.cpp; do
  [ -e "$f" ] || continue
  count=$((count + 1))
  name=$(basename "$f" .cpp)
  if [ -e "$tmp/$name.excerpt" ]; then
    source="$root/$(cat "$tmp/$name.excerpt")"
    normal "$source" > "$tmp/$name.source"
    missing=$(normal "$f" | grep -vx '\.\.\.' | grep -vxF -f "$tmp/$name.source")
    if [ -f "$source" ] && [ -z "$missing" ]; then
      echo "ok   $name: an excerpt of $(cat "$tmp/$name.excerpt")"
    else
      echo "FAIL: $name: not in $(cat "$tmp/$name.excerpt"):"; echo "$missing" | head -5; status=1
    fi
  elif grep -q "int main(" "$f"; then
    if out=$(eval "$cmd -o '$tmp/$name' '$f' $objects" 2>&1) && (cd "$tmp" && "./$name" >"$name.out" 2>&1); then
      echo "ok   $name: compiles and runs: $(head -1 "$tmp/$name.out")"
    else
      echo "FAIL: $name"; echo "$out" | head -20; head -5 "$tmp/$name.out" 2>/dev/null; status=1
    fi
  else
    { printf '#include <stformer/stformer.hpp>\nusing namespace stformer;\n'; cat "$f"; printf '\nint main() {}\n'; } > "$tmp/$name.decl.cpp"
    if out=$(eval "$cmd -c -o '$tmp/$name.o' '$tmp/$name.decl.cpp'" 2>&1); then
      echo "ok   $name: declarations, compile"
    else
      echo "FAIL: $name (declarations)"; echo "$out" | head -20; status=1
    fi
  fi
done
[ "$count" -gt 0 ] || { echo "FAIL: no C++ block found in $*"; status=1; }
exit $status
