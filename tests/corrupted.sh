#!/usr/bin/env bash
# Corrupted checkpoints (issue 41): the loading commands refuse the variants that
# tests/corrupt.py writes of small valid checkpoints made here by the programs themselves:
# max_value's pointer and set models in float32 and int8, and wikitext_lm's language model in
# float32 and with its int8 embedding and head. Refusing means an exit code in [1, 123] (not 0,
# not timeout's 124 nor a signal's 128 + n) within 60 s, and no sanitizer report on stderr.
# checkpoint_header converts any safetensors file and knows no model: it is given the variants
# any reader must refuse (corrupt.py's level "format") and the non-finite floats it refuses.
# The language model's checkpoints are 36 MB and its commands slow: one variant of each kind is
# made of them, and each is given one of the commands, in turn.
# Usage: corrupted.sh MAX_VALUE WIKITEXT_LM CHECKPOINT_HEADER   ($STFORMER_RUN: a wrapper;
#   $CORRUPTED_JOBS: commands run at once, default 2)
set -uo pipefail
mv_bin=$1 lm_bin=$2 header_bin=$3
run=(${STFORMER_RUN:-})
jobs=${CORRUPTED_JOBS:-2}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS

die() { echo "FAIL: $*"; exit 1; }
# fixture WHAT PROGRAM ARGS...: makes a fixture; its failure ends the test
fixture() {
  local what=$1
  shift
  "${run[@]}" "$@" >"$tmp/make.out" 2>&1 </dev/null || { sed 's/^/    /' "$tmp/make.out" | tail -5; die "making $what: $(basename "$1") ${*:2}"; }
}

# The fixtures, with the commands of tests/programs.sh: a pointer model trained for 2 iterations and
# a set model for 1, both quantized, sets for predict, and a language model trained for one step on a
# corpus of exactly the model's V = 33,278 words (33,277 and <eos>), then quantized.
fixture "float pointer" "$mv_bin" train --iterations 2 --threads 1 --checkpoint "$tmp/pointer.safetensors"
fixture "float set" "$mv_bin" train --model set --iterations 1 --threads 1 --checkpoint "$tmp/set.safetensors"
fixture "int8 pointer" "$mv_bin" quantize --checkpoint "$tmp/pointer.safetensors" --output "$tmp/pointer-int8.safetensors" --sets 10 --threads 1
fixture "int8 set" "$mv_bin" quantize --checkpoint "$tmp/set.safetensors" --output "$tmp/set-int8.safetensors" --sets 10 --threads 1
fixture "sets" "$mv_bin" sets --output "$tmp/sets.safetensors"
mkdir -p "$tmp/corpus"
/usr/bin/python3 - "$tmp/corpus" <<'EOF'
import sys
d = sys.argv[1]
words = ['w%d' % i for i in range(33277)]
open(d + '/train.txt', 'w').write('\n'.join(' '.join(words[i:i + 20]) for i in range(0, len(words), 20)) + '\n')
for split in ('valid', 'test'):
    open(d + '/' + split + '.txt', 'w').write(' '.join(words[:60]) + '\n')
EOF
fixture "float language model" "$lm_bin" train --data "$tmp/corpus" --steps 1 --eval-every 0 --threads 1 --checkpoint "$tmp/lm.safetensors"
fixture "int8 language model" "$lm_bin" quantize --checkpoint "$tmp/lm.safetensors" --output "$tmp/lm-int8.safetensors"
echo "fixtures made in $((SECONDS - start)) s"

# The variants: FIXTURE -> folder v/FIXTURE of corrupt.py's files
corrupt() {
  /usr/bin/python3 "$here/corrupt.py" "$tmp/$1.safetensors" "$tmp/v/$1" "${@:2}" >/dev/null || die "corrupt.py $1"
}
# The variants any reader refuses ("format") test the one safetensors reader the programs
# share: they are made of the float pointer model and, one of each kind, of the language model.
# Under the sanitizers or an emulator (STFORMER_SLOW) every run is 10 to 30 times slower: two
# variants of each category of the small checkpoints too.
few=()
[ -n "${STFORMER_SLOW:-}" ] && few=(--per-category 2)
corrupt pointer "${few[@]}"
corrupt set --levels model "${few[@]}"
corrupt pointer-int8 --levels model,int8 "${few[@]}"
corrupt set-int8 --levels model,int8 "${few[@]}"
corrupt lm --per-category 1
corrupt lm-int8 --per-category 1 --levels model,int8

# The commands: arguments separated by ';', @ standing for the variant and @OUT for an output path.
mv_float=("eval;--sets;10;--threads;1;--checkpoint;@" "predict;--threads;1;--checkpoint;@;--input;$tmp/sets.safetensors;--output;@OUT.safetensors"
  "quantize;--sets;10;--threads;1;--checkpoint;@;--output;@OUT.safetensors")
mv_int8=("${mv_float[@]:0:2}")
lm_int8=("eval;--threads;1;--data;$tmp/corpus;--checkpoint;@" "predict;--top;3;--context;w1 w2;--checkpoint;@"
  "generate;--words;3;--prompt;w1;--checkpoint;@")
lm_float=("${lm_int8[@]}" "quantize;--checkpoint;@;--output;@OUT.safetensors")
header=("@;@OUT.hpp" "--c;@;@OUT.h")
: >"$tmp/jobs"
# add [--rotate] FIXTURE GLOB PROGRAM COMMANDS...: every command on every variant of FIXTURE
# whose name matches GLOB, one job a line; with --rotate one command on each variant, in turn.
# The sanitizers make each run take 0.3 s (the language model's, 5 s): each variant is given one
# command, in turn, so that every command sees each kind of change.
job() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$tmp/jobs"; }
add() {
  local rotate=0 v c i=0
  [ "$1" = --rotate ] && rotate=1 && shift
  local fixture=$1 glob=$2 bin=$3
  shift 3
  for v in "$tmp/v/$fixture"/$glob; do
    if [ $rotate = 1 ]; then job "$bin" "$v" "${@:i % $# + 1:1}"; else for c in "$@"; do job "$bin" "$v" "$c"; done; fi
    i=$((i + 1))
  done
}
add --rotate pointer 'format.*' "$mv_bin" "${mv_float[@]}"
add --rotate pointer 'model.*' "$mv_bin" "${mv_float[@]}"
add --rotate set '*' "$mv_bin" "${mv_float[@]}"
add --rotate pointer-int8 '*' "$mv_bin" "${mv_int8[@]}"
add --rotate set-int8 '*' "$mv_bin" "${mv_int8[@]}"
add --rotate lm '*' "$lm_bin" "${lm_float[@]}"
add --rotate lm-int8 '*' "$lm_bin" "${lm_int8[@]}"
# checkpoint_header: the variants every reader refuses, and non-finite floats
add --rotate pointer 'format.*' "$header_bin" "${header[@]}"
add pointer 'model.nonfinite.*' "$header_bin" "${header[@]}"
add --rotate pointer-int8 'model.nonfinite.*' "$header_bin" "${header[@]}"
add --rotate lm 'format.*' "$header_bin" "${header[@]}"
kinds=$((${#mv_float[@]} + ${#lm_float[@]} + ${#header[@]}))

# one BIN VARIANT COMMAND ID: runs it, appends "ok" or "FAIL ..." to $tmp/results
one() {
  local bin=$1 v=$2 id=$4 args=() a out="$tmp/o/$4"
  local IFS=';'
  for a in $3; do
    a=${a//@OUT/$out}
    args+=("${a/#@/$v}")
  done
  IFS=' '
  timeout 60 "${run[@]}" "$bin" "${args[@]}" >"$out.stdout" 2>"$out.stderr" </dev/null
  local rc=$? shown="$(basename "$bin") ${args[*]/#$tmp\//}"
  if [ $rc -eq 0 ] || [ $rc -ge 124 ]; then
    echo "FAIL exit $rc: $shown :: $(cat "$out.stderr" "$out.stdout" | grep -v '^$' | head -1 | cut -c1-300)" >>"$tmp/results"
  elif grep -q "runtime error\|AddressSanitizer\|LeakSanitizer" "$out.stderr"; then
    echo "FAIL sanitizer report (exit $rc): $shown :: $(grep -m1 "runtime error\|Sanitizer" "$out.stderr")" >>"$tmp/results"
  else
    echo "ok" >>"$tmp/results"
  fi
  rm -f "$out"*
}
mkdir -p "$tmp/o"
: >"$tmp/results"
id=0
while IFS=$'\t' read -r bin v c; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  id=$((id + 1))
  one "$bin" "$v" "$c" $id &
done <"$tmp/jobs"
wait

files=$(find "$tmp/v" -type f | wc -l)
commands=$(wc -l <"$tmp/jobs")
failures=$(grep -c '^FAIL' "$tmp/results")
grep '^FAIL' "$tmp/results" | sort
[ "$(wc -l <"$tmp/results")" -eq "$commands" ] || die "$(wc -l <"$tmp/results") results of $commands commands"
if [ "$failures" -ne 0 ]; then
  echo "$failures of $commands commands on $files corrupted files not refused ($((SECONDS - start)) s)"
  exit 1
fi
echo "$files files × $kinds commands: $commands runs, all refused ($((SECONDS - start)) s)"
