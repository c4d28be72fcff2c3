#!/usr/bin/env bash
# stformer's decoding pass against llama2.c's run.c, one thread each, the same weights:
#   bash bench/llama2c/run.sh LLAMA2C_DIR OUT_DIR [ROUNDS]
# LLAMA2C_DIR: a checkout of karpathy/llama2.c (model.py, export.py, run.c, tokenizer.bin), used
# as it is and never copied here. OUT_DIR: a folder outside this checkout for what the script
# makes: the models at stories260K's and stories15M's shapes (bench/llama2c/models.py: llama2.c's
# model.py with its own initialisation, written by its export.py as NAME.bin and by stformer_export
# as NAME.hpp and NAME.safetensors), run.c built as its README's fastest one-thread build
# (gcc -Ofast -march=native), and bench/llama2c/generate.cpp built for each model (-O2
# -march=native: the widest backend this CPU has; MARCH=x86-64-v3 for the AVX2 one).
# Both generate greedily (run.c -t 0; stformer's Sampler at temperature 0) from BOS for all the
# model's positions, sampling included, and print the tokens' text: the texts must be the same
# (the argmax of every step agreeing). ROUNDS (default 5) runs of each, alternating, on core 1;
# the table gives the medians of tokens per second (run.c's measure: all tokens but the first),
# their ratio, and stformer's time of one step near positions 16 and 256; and what one core reads
# from memory a second (bench/llama2c/stream.c), which bounds a model whose weights exceed the cache.
# Exit status: 0 when every run agreed; 1 when a text differed or a step failed; 2 for a bad
# command line.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: bash bench/llama2c/run.sh LLAMA2C_DIR OUT_DIR [ROUNDS]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
for f in model.py export.py run.c tokenizer.bin; do
  [ -f "$1/$f" ] || { echo "run.sh: $1/$f: no such file (LLAMA2C_DIR is a checkout of karpathy/llama2.c)" >&2; exit 2; }
done
src=$(cd "$1" && pwd)
out=$(realpath -m "$2")
case "$out/" in "$root"/*) echo "run.sh: OUT_DIR $out is inside this checkout; give a folder outside it" >&2; exit 2 ;; esac
rounds=${3:-5}
mkdir -p "$out"
pin=(); command -v taskset > /dev/null && pin=(taskset -c 1)

/usr/bin/python3 -W ignore "$here/models.py" "$src" "$out" 2> "$out/models.log" > "$out/models.txt" ||
  { cat "$out/models.log" >&2; exit 1; }
gcc -Ofast -march=native "$src/run.c" -lm -o "$out/run"
cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
echo "| model | run.c tok/s | stformer tok/s | ratio | texts | stformer step at 16 / 256 (or the last) |" > "$out/table.md"
echo "|---|---|---|---|---|---|" >> "$out/table.md"
status=0
while read -r _ name positions; do
  g++ -std=c++20 -O2 -march="${MARCH:-native}" -DSTFORMER_SIMD=1 -DXTENSOR_USE_XSIMD -ffp-contract=off -I"$root/include" -I"$out" \
    -DMODEL_HEADER="\"$name.hpp\"" -DMODEL="$name" -DPOSITIONS="$positions" \
    "$here/generate.cpp" "$root/src/safetensors.cpp" -o "$out/generate_$name"
  : > "$out/$name.run.tps"; : > "$out/$name.stformer.tps"
  for ((r = 0; r < rounds; ++r)); do
    "${pin[@]}" "$out/run" "$out/$name.bin" -t 0 -n "$positions" -z "$src/tokenizer.bin" > "$out/$name.run.txt" 2> "$out/$name.run.err"
    grep -o "achieved tok/s: [0-9.]*" "$out/$name.run.err" | cut -d' ' -f3 >> "$out/$name.run.tps"
    "${pin[@]}" "$out/generate_$name" "$out/$name.safetensors" "$src/tokenizer.bin" "$positions" > "$out/$name.stformer.txt" 2> "$out/$name.stformer.err"
    grep -o "achieved tok/s: [0-9.]*" "$out/$name.stformer.err" | cut -d' ' -f3 >> "$out/$name.stformer.tps"
  done
  same=same
  cmp -s "$out/$name.run.txt" "$out/$name.stformer.txt" || { same=DIFFERENT; status=1; }
  median() { sort -g "$1" | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
  a=$(median "$out/$name.run.tps") b=$(median "$out/$name.stformer.tps")
  steps=$(grep -o "step at 16: [0-9.]* us, at [0-9]*: [0-9.]* us" "$out/$name.stformer.err" | sed 's/step at 16: //; s/ us, at \([0-9]*\): / \/ /; s/ us$/ µs/')
  printf "| %s (%s positions) | %.0f | %.0f | %.2f | %s (%s B) | %s |\n" "$name" "$positions" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN {print b / a}')" "$same" \
    "$(wc -c < "$out/$name.run.txt")" "$steps" >> "$out/table.md"
done < <(grep "^model " "$out/models.txt")
# what one core reads a second: stories15M's 61 MB of weights (above the last-level cache: from
# memory) and 16 MB (within it), the bound of a step that reads every weight once
gcc -O3 -march=native "$here/stream.c" -o "$out/stream"
echo "One core reads $("${pin[@]}" "$out/stream" 61 | cut -d' ' -f1) GB/s over 61 MB (from memory), $("${pin[@]}" "$out/stream" 16 | cut -d' ' -f1) GB/s over 16 MB." >> "$out/table.md"
echo "CPU: $cpu; medians of $rounds runs each, alternating, on core 1; $(date -u +%Y-%m-%d)" >> "$out/table.md"
cat "$out/table.md"
exit $status
