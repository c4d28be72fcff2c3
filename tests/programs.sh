#!/usr/bin/env bash
# The programs as a user runs them, with bad command lines and bad files (issue 8):
#   every refusal exits non-zero with a message that names the problem, never with a crash
#   (a signal, or a sanitizer's report);
#   SIGINT/SIGTERM during training write a checkpoint, exit with 128 + signal, and --resume
#   then ends bit for bit where an uninterrupted run ends;
#   a non-finite loss stops training, naming the step, and leaves the last checkpoint as it was;
#   SIGKILL while a checkpoint is being written leaves the previous one valid.
# With WikiText-2 (WIKITEXT, when the folder exists) the language model is interrupted and
# made to diverge too.
# The info subcommands print the forward-only memory plans.
# Usage: programs.sh MAX_VALUE WIKITEXT_LM CHECKPOINT_HEADER DEMO [WIKITEXT]   ($STFORMER_RUN: a wrapper)
set -uo pipefail
mv_bin=$1 lm_bin=$2 header_bin=$3 demo_bin=$4 wikitext=${5:-}
run=(${STFORMER_RUN:-})
# Under an emulator or the sanitizers (STFORMER_SLOW, set by tests/meson.build) training is
# 30 to 300 times slower: shorter runs, the pointer model, 3 of the thread counts, one of the two
# signals (the same handler), and no language model.
slow=${STFORMER_SLOW:-}
iterations=60 kill_model=set attempts=3 lane_threads="1 2 3 4 5" lane_iterations=4 signals="INT TERM"
[ -n "$slow" ] && iterations=5 kill_model=pointer attempts=1 wikitext="" lane_threads="1 2 5" lane_iterations=2 signals=TERM
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# refused CODE "WORDS" PROGRAM ARGS...: exit code CODE (any: one in [1, 127]), stderr holds every
# |-separated word, and no sanitizer report.
refused() {
  local code=$1 words=$2
  shift 2
  "${run[@]}" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  local rc=$?
  local shown="$(basename "$1") ${*:2}"
  if [ "$code" = any ] && { [ $rc -eq 0 ] || [ $rc -ge 128 ]; }; then fail "$shown: exit code $rc, expected a refusal"; sed 's/^/    /' "$tmp/err" | head -5; return; fi
  if [ "$code" != any ] && [ $rc -ne "$code" ]; then fail "$shown: exit code $rc, expected $code"; sed 's/^/    /' "$tmp/err" | head -5; return; fi
  if grep -q "Sanitizer\|runtime error:" "$tmp/err"; then fail "$shown: sanitizer report"; head -20 "$tmp/err"; return; fi
  local IFS='|'
  for w in $words; do
    grep -qF -- "$w" "$tmp/err" || { fail "$shown: stderr lacks '$w':"; sed 's/^/    /' "$tmp/err" | head -5; return; }
  done
  echo "ok   $shown  ->  exit $rc: $(grep -v '^Run with --help' "$tmp/err" | head -1)"
}
# refuse "WORDS" PROGRAM ARGS...: refused (exit code in [1, 127]), as refused says.
refuse() { refused any "$@"; }
# usage_error "WORDS" PROGRAM ARGS...: refused as a bad command line: exit code 2 (every
# program's --help promises it), as refused says.
usage_error() { refused 2 "$@"; }

# refuse_keeps "WORDS" FILE PROGRAM ARGS...: refused as refuse checks, and FILE (which the
# command would write over) keeps its bytes.
refuse_keeps() {
  local words=$1 file=$2 before
  shift 2
  before=$(sha256sum <"$file")
  refuse "$words" "$@"
  [ "$(sha256sum <"$file")" = "$before" ] || fail "$(basename "$1") ${*:2}: $file changed"
}

# keeps "WORDS" FILE PROGRAM ARGS...: refused as a bad command line (exit 2), stderr holds every
# |-separated word, and FILE (one of the command's inputs) keeps its bytes.
keeps() {
  local words=$1 file=$2
  shift 2
  local before
  before=$(sha256sum <"$file")
  "${run[@]}" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  local rc=$?
  local shown="$(basename "$1") ${*:2}"
  if [ $rc -ne 2 ]; then fail "$shown: exit code $rc, expected 2"; sed 's/^/    /' "$tmp/err" | head -5; return; fi
  [ "$(sha256sum <"$file")" = "$before" ] || { fail "$shown: $file changed"; return; }
  local IFS='|'
  for w in $words; do
    grep -qF -- "$w" "$tmp/err" || { fail "$shown: stderr lacks '$w':"; sed 's/^/    /' "$tmp/err" | head -5; return; }
  done
  echo "ok   $shown  ->  exit 2, $(basename "$file") intact: $(head -1 "$tmp/err")"
}

# Files to feed them: a trained pointer checkpoint, sets, a file that is not safetensors, a
# pointer checkpoint of another configuration (one encoder block), a "language model" checkpoint
# with SPEC's 33,278-word vocabulary but the pointer model's tensors, a tiny corpus.
"${run[@]}" "$mv_bin" train --iterations 3 --checkpoint "$tmp/pointer.safetensors" >/dev/null || fail "train for the fixtures"
"${run[@]}" "$mv_bin" sets --output "$tmp/sets.safetensors" >/dev/null || fail "sets for the fixtures"
head -c 1000 /dev/urandom >"$tmp/garbage.safetensors"
mkdir -p "$tmp/folder" "$tmp/empty_corpus" "$tmp/tiny_corpus"
for s in train valid test; do echo "a b c" >"$tmp/tiny_corpus/$s.txt"; done
/usr/bin/python3 - "$tmp" <<'EOF'
import json, struct, sys
d = sys.argv[1]
def read(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]
def write(p, header, tensors):  # tensors: name -> (dtype, shape, bytes)
    h, data = dict(header), b''
    for k, (t, s, v) in tensors.items():
        h[k] = {'dtype': t, 'shape': s, 'data_offsets': [len(data), len(data) + len(v)]}; data += v
    j = json.dumps(h).encode(); j += b' ' * (-len(j) % 8)
    open(p, 'wb').write(struct.pack('<Q', len(j)) + j + data)
h, data = read(d + '/pointer.safetensors')
params = {k: (v['dtype'], v['shape'], data[v['data_offsets'][0]:v['data_offsets'][1]]) for k, v in h.items()
          if k != '__metadata__' and not k.startswith(('optim.', 'state.'))}
write(d + '/one_block.safetensors', {}, {k: v for k, v in params.items() if not k.startswith('blocks.1.')})
vocab = ''.join('w%d\n' % i for i in range(33278)).encode()
write(d + '/not_lm.safetensors', {}, dict(params, **{'state.vocab': ('U8', [len(vocab)], vocab)}))
# a NaN in a ScaleNorm's gain: it loads as a float, and would give garbage
nan = struct.pack('<f', float('nan'))
write(d + '/nan.safetensors', {}, dict(params, **{'blocks.0.sn1.g': ('F32', [1], nan)}))
# a language model's embedding without a vocabulary (as exported from PyTorch)
write(d + '/no_vocab.safetensors', {}, {'embedding.weight': ('F32', [33278, 128], bytes(33278 * 128 * 4))})
EOF

echo "== max_value: command lines (exit 2)"
usage_error "unknown subcommand 'frobnicate'|the subcommands: train, eval, predict, plot, quantize, sets, info" "$mv_bin" frobnicate
usage_error "A subcommand is required|one of: train, eval" "$mv_bin"
usage_error "--bogus" "$mv_bin" train --bogus 1
usage_error "--checkpoint is required" "$mv_bin" eval
usage_error "--iterations|0 is out of range: 1 to 10000000" "$mv_bin" train --iterations 0
usage_error "--iterations|many is not a whole number" "$mv_bin" train --iterations many
usage_error "--lr|-1 is not a number above 0" "$mv_bin" train --lr -1
usage_error "--threads" "$mv_bin" train --threads 0
usage_error "--lanes" "$mv_bin" train --lanes 0
usage_error "--lanes|251 is out of range: 1 to 250" "$mv_bin" train --lanes 251
usage_error "--resume|excludes|--lanes" "$mv_bin" train --resume "$tmp/pointer.safetensors" --lanes 3
usage_error "--model" "$mv_bin" train --model transformer
usage_error "--seed|the seed -1 is not a non-negative integer" "$mv_bin" train --seed -1
usage_error "--seed|the seed 18446744073709551616 is above 18446744073709551615" "$mv_bin" train --seed 18446744073709551616
usage_error "--sets|0 is out of range" "$mv_bin" eval --checkpoint "$tmp/pointer.safetensors" --sets 0
usage_error "--sets|abc is not a whole number" "$mv_bin" eval --checkpoint "$tmp/pointer.safetensors" --sets abc
usage_error "--sets|501" "$mv_bin" sets --output "$tmp/x.safetensors" --sets 501
usage_error "--resume|excludes|--lr" "$mv_bin" train --resume "$tmp/pointer.safetensors" --lr 0.1
echo "== max_value: paths and files"
mkfifo "$tmp/fifo"
usage_error "--checkpoint|$tmp/absent.safetensors does not exist" "$mv_bin" eval --checkpoint "$tmp/absent.safetensors"
usage_error "--checkpoint|the path is empty" "$mv_bin" eval --checkpoint ""
usage_error "--checkpoint|the path is empty" "$mv_bin" train --checkpoint ""
usage_error "--checkpoint|$tmp/folder is a folder (directory), not a regular file" "$mv_bin" eval --checkpoint "$tmp/folder"
usage_error "--checkpoint|/dev/zero is a character device, not a regular file|not read" "$mv_bin" eval --checkpoint /dev/zero
usage_error "--input|$tmp/fifo is a FIFO (pipe), not a regular file" "$mv_bin" predict --checkpoint "$tmp/pointer.safetensors" --input "$tmp/fifo" --output "$tmp/y.safetensors"
usage_error "--resume|/dev/zero is a character device" "$mv_bin" train --resume /dev/zero
usage_error "--checkpoint|$tmp/no/such/folder" "$mv_bin" train --iterations 1 --checkpoint "$tmp/no/such/folder/x.safetensors"
usage_error "--output|is a folder" "$mv_bin" predict --checkpoint "$tmp/pointer.safetensors" --input "$tmp/sets.safetensors" --output "$tmp/folder"
usage_error "--output|does not exist" "$mv_bin" plot --checkpoint "$tmp/pointer.safetensors" --output "$tmp/no/plot.png"
usage_error "--output|$tmp/fifo is a FIFO (pipe), not a regular file" "$mv_bin" sets --output "$tmp/fifo"
usage_error "--output|/dev/null is a character device, not a regular file" "$mv_bin" quantize --checkpoint "$tmp/pointer.safetensors" --output /dev/null
mkdir -p "$tmp/folder/curve.csv"  # where plot would write the CSV beside its PNG
usage_error "output $tmp/folder/curve.csv is a folder" "$mv_bin" plot --checkpoint "$tmp/pointer.safetensors" --output "$tmp/folder/curve.png"
mkdir -p "$tmp/locked" && chmod 555 "$tmp/locked"
if ! touch "$tmp/locked/probe" 2>/dev/null; then  # root writes anywhere: then there is no unwritable folder to test with
  usage_error "--checkpoint|the folder of the output $tmp/locked/x.safetensors is not writable" "$mv_bin" train --iterations 1 --checkpoint "$tmp/locked/x.safetensors"
else echo "(run as root: an unwritable folder is not tested)"; fi
refuse "garbage.safetensors|not a safetensors file|header length" "$mv_bin" eval --checkpoint "$tmp/garbage.safetensors"
refuse "sets.safetensors|tensor 'proj.weight' is missing" "$mv_bin" eval --checkpoint "$tmp/sets.safetensors"
refuse "one_block.safetensors|holds neither model|pointer model: |tensor 'blocks.1.|set model: " "$mv_bin" eval --checkpoint "$tmp/one_block.safetensors"
refuse "input $tmp/pointer.safetensors|no tensor 'x'" "$mv_bin" predict --checkpoint "$tmp/pointer.safetensors" --input "$tmp/pointer.safetensors" --output "$tmp/y.safetensors"
refuse "not_lm.safetensors|not a training checkpoint" "$mv_bin" train --resume "$tmp/not_lm.safetensors"
# training checkpoints whose state --resume would not take: a step of -1 or past the run, a seed
# of "-1" (the command line refuses it); each left as it was
/usr/bin/python3 - "$tmp" <<'EOF'
import json, struct, sys
d = sys.argv[1]
b = open(d + '/pointer.safetensors', 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n]); data = b[8 + n:]
def write(p, h, data):
    j = json.dumps(h).encode(); j += b' ' * (-len(j) % 8)
    open(p, 'wb').write(struct.pack('<Q', len(j)) + j + data)
o = h['state.step']['data_offsets'][0]
write(d + '/step_minus1.safetensors', h, data[:o] + struct.pack('<q', -1) + data[o + 8:])
write(d + '/step_past.safetensors', h, data[:o] + struct.pack('<q', 4) + data[o + 8:])
h['__metadata__']['seed'] = '-1'
write(d + '/seed_minus1.safetensors', h, data)
EOF
refuse_keeps "checkpoint $tmp/step_minus1.safetensors|'state.step' is -1, below 0" "$tmp/step_minus1.safetensors" "$mv_bin" train --resume "$tmp/step_minus1.safetensors"
refuse_keeps "checkpoint $tmp/step_past.safetensors|'state.step' is 4, beyond the run's iterations 3" "$tmp/step_past.safetensors" "$mv_bin" train --resume "$tmp/step_past.safetensors"
refuse_keeps "checkpoint $tmp/seed_minus1.safetensors|metadata \"seed\" is \"-1\"" "$tmp/seed_minus1.safetensors" "$mv_bin" train --resume "$tmp/seed_minus1.safetensors"
refuse "checkpoint $tmp/seed_minus1.safetensors|metadata \"seed\" is \"-1\"" "$mv_bin" quantize --checkpoint "$tmp/seed_minus1.safetensors" --output "$tmp/q.safetensors"
refuse "nan.safetensors|tensor 'blocks.0.sn1.g' holds a value that is not finite" "$mv_bin" eval --checkpoint "$tmp/nan.safetensors"
echo "== max_value: an output over one of its inputs"
keeps "the output $tmp/sets.safetensors is the input $tmp/sets.safetensors" "$tmp/sets.safetensors" \
  "$mv_bin" predict --checkpoint "$tmp/pointer.safetensors" --input "$tmp/sets.safetensors" --output "$tmp/sets.safetensors"
keeps "is the input $tmp/pointer.safetensors" "$tmp/pointer.safetensors" \
  "$mv_bin" predict --checkpoint "$tmp/pointer.safetensors" --input "$tmp/sets.safetensors" --output "$tmp/pointer.safetensors"
ln -s "$tmp/pointer.safetensors" "$tmp/link.safetensors"
keeps "the output $tmp/link.safetensors is the input $tmp/pointer.safetensors" "$tmp/pointer.safetensors" \
  "$mv_bin" quantize --checkpoint "$tmp/pointer.safetensors" --output "$tmp/link.safetensors"
keeps "is the input $tmp/pointer.safetensors" "$tmp/pointer.safetensors" "$mv_bin" quantize --checkpoint "$tmp/pointer.safetensors" --output "$tmp/./pointer.safetensors"
refuse "sets.safetensors|not a training checkpoint" "$mv_bin" train --resume "$tmp/sets.safetensors"

echo "== wikitext_lm"
usage_error "A subcommand is required|one of: train, eval, predict" "$lm_bin"
usage_error "unknown subcommand 'trian'|the subcommands: train, eval, predict, generate, quantize, plot, info" "$lm_bin" trian --data "$tmp/tiny_corpus"
usage_error "--bogus" "$lm_bin" eval --checkpoint "$tmp/pointer.safetensors" --data "$tmp/tiny_corpus" --bogus
usage_error "--seed" "$lm_bin" generate --checkpoint "$tmp/pointer.safetensors" --prompt a --seed -3
usage_error "--seed|is above 18446744073709551615" "$lm_bin" generate --checkpoint "$tmp/pointer.safetensors" --prompt a --seed 99999999999999999999
usage_error "--data|$tmp/absent" "$lm_bin" train --data "$tmp/absent"
usage_error "--data $tmp/empty_corpus|corpus file $tmp/empty_corpus/train.txt does not exist" "$lm_bin" train --data "$tmp/empty_corpus" --steps 1
mkdir -p "$tmp/fifo_corpus" && cp "$tmp/tiny_corpus/train.txt" "$tmp/tiny_corpus/test.txt" "$tmp/fifo_corpus/" && mkfifo "$tmp/fifo_corpus/valid.txt"
usage_error "corpus file $tmp/fifo_corpus/valid.txt is a FIFO (pipe)|not read" "$lm_bin" train --data "$tmp/fifo_corpus" --steps 1
refuse "the vocabulary has 4 words|V = 33278" "$lm_bin" train --data "$tmp/tiny_corpus" --steps 1
usage_error "--steps|0 is out of range" "$lm_bin" train --data "$tmp/tiny_corpus" --steps 0
usage_error "--steps|abc is not a whole number" "$lm_bin" train --data "$tmp/tiny_corpus" --steps abc
usage_error "--save-every|1.5 is not a whole number" "$lm_bin" train --data "$tmp/tiny_corpus" --save-every 1.5
usage_error "--minutes|excludes" "$lm_bin" train --data "$tmp/tiny_corpus" --steps 5 --minutes 1
usage_error "--threads" "$lm_bin" train --data "$tmp/tiny_corpus" --threads 0
usage_error "--checkpoint|does not exist" "$lm_bin" train --data "$tmp/tiny_corpus" --checkpoint "$tmp/no/lm.safetensors"
usage_error "--checkpoint|the path is empty" "$lm_bin" train --data "$tmp/tiny_corpus" --checkpoint ""
usage_error "--curve|is a folder" "$lm_bin" train --data "$tmp/tiny_corpus" --curve "$tmp/folder"
usage_error "--checkpoint|/dev/zero is a character device" "$lm_bin" eval --checkpoint /dev/zero --data "$tmp/tiny_corpus"
usage_error "--resume|$tmp/fifo is a FIFO" "$lm_bin" train --data "$tmp/tiny_corpus" --resume "$tmp/fifo"
usage_error "--temperature|abc is not a number" "$lm_bin" generate --checkpoint "$tmp/pointer.safetensors" --prompt "a" --temperature abc
usage_error "--temperature|0 is out of range: 0.001 to 100" "$lm_bin" generate --checkpoint "$tmp/pointer.safetensors" --prompt "a" --temperature 0
usage_error "--top|0 is out of range" "$lm_bin" predict --checkpoint "$tmp/pointer.safetensors" --context "a" --top 0
refuse "pointer.safetensors|holds no language model|max_value's pointer model" "$lm_bin" predict --checkpoint "$tmp/pointer.safetensors" --context "a"
refuse "no_vocab.safetensors|no vocabulary|--data WIKITEXT2_DIR" "$lm_bin" predict --checkpoint "$tmp/no_vocab.safetensors" --context "a"
usage_error "--context|empty" "$lm_bin" predict --checkpoint "$tmp/no_vocab.safetensors" --context " "
usage_error "--prompt|empty" "$lm_bin" generate --checkpoint "$tmp/no_vocab.safetensors" --prompt ""
usage_error "--lr|nan is not a number above 0" "$lm_bin" train --data "$tmp/tiny_corpus" --lr nan
# vocabularies: a checkpoint's that is not one (a word repeated) names the file, the line and the
# word; a word of the context not in the vocabulary names the word and the file
/usr/bin/python3 - "$tmp" <<'EOF'
import json, struct, sys
d = sys.argv[1]
b = open(d + '/no_vocab.safetensors', 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n]); data = b[8 + n:]
vocab = ('w0\nw1\nw0\n' + ''.join('x%d\n' % i for i in range(33275))).encode()
h['state.vocab'] = {'dtype': 'U8', 'shape': [len(vocab)], 'data_offsets': [len(data), len(data) + len(vocab)]}
j = json.dumps(h).encode(); j += b' ' * (-len(j) % 8)
open(d + '/bad_vocab.safetensors', 'wb').write(struct.pack('<Q', len(j)) + j + data + vocab)
EOF
refuse "checkpoint $tmp/bad_vocab.safetensors|'state.vocab' is not a vocabulary|line 3: the word 'w0' repeats line 1" "$lm_bin" predict --checkpoint "$tmp/bad_vocab.safetensors" --context "w1"
if [ -z "$slow" ]; then  # a model of SPEC's shape trained two steps on a corpus of 33,278 words: a few seconds
  mkdir -p "$tmp/v_corpus"
  /usr/bin/python3 -c "import sys; open(sys.argv[1] + '/train.txt', 'w').write(' '.join('w%d' % i for i in range(33277)) + '\\n')" "$tmp/v_corpus"
  for s in valid test; do echo "w1 w2 w3" >"$tmp/v_corpus/$s.txt"; done
  "${run[@]}" "$lm_bin" train --data "$tmp/v_corpus" --steps 2 --eval-every 0 --threads 1 --checkpoint "$tmp/lm2.safetensors" >/dev/null 2>"$tmp/err" ||
    fail "wikitext_lm train on a corpus of 33,278 words: $(cat "$tmp/err")"
  refuse "the word 'zzz' of --context is not in the vocabulary of checkpoint $tmp/lm2.safetensors" "$lm_bin" predict --checkpoint "$tmp/lm2.safetensors" --context "w1 zzz"
  refuse "the word 'w99999' of --prompt|checkpoint $tmp/lm2.safetensors" "$lm_bin" generate --checkpoint "$tmp/lm2.safetensors" --prompt "w99999"
  # --resume of a step below 0, or past --steps: refused, the checkpoint left as it was
  /usr/bin/python3 - "$tmp" <<'EOF'
import json, struct, sys
d = sys.argv[1]
b = open(d + '/lm2.safetensors', 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
o = 8 + n + json.loads(b[8:8 + n])['state.step']['data_offsets'][0]
open(d + '/lm_step_minus1.safetensors', 'wb').write(b[:o] + struct.pack('<q', -1) + b[o + 8:])
EOF
  refuse_keeps "checkpoint $tmp/lm_step_minus1.safetensors|'state.step' is -1, below 0" "$tmp/lm_step_minus1.safetensors" \
    "$lm_bin" train --data "$tmp/v_corpus" --steps 2 --eval-every 0 --resume "$tmp/lm_step_minus1.safetensors" --checkpoint "$tmp/lm_step_minus1.safetensors"
  refuse_keeps "checkpoint $tmp/lm2.safetensors|'state.step' is 2, beyond the run's --steps 1" "$tmp/lm2.safetensors" \
    "$lm_bin" train --data "$tmp/v_corpus" --steps 1 --eval-every 0 --resume "$tmp/lm2.safetensors" --checkpoint "$tmp/lm2.safetensors"
  # the GPT over bytes (--model gpt): two steps; its checkpoint taken as it is by eval, generate
  # and quantize, its integer model by eval and generate; predict, and a split shorter than its
  # window, refused
  mkdir -p "$tmp/g_corpus" && cp "$tmp/v_corpus/train.txt" "$tmp/g_corpus/"
  for s in valid test; do /usr/bin/python3 -c "import sys; open(sys.argv[1], 'w').write('w1 w2 w3 w4 w5 w6 w7 w8 w9 w10\\n' * 30)" "$tmp/g_corpus/$s.txt"; done
  usage_error "--model gpt|not --sgd" "$lm_bin" train --model gpt --data "$tmp/g_corpus" --steps 2 --sgd
  usage_error "--model|cnn not in" "$lm_bin" train --model cnn --data "$tmp/g_corpus" --steps 2
  "${run[@]}" "$lm_bin" train --model gpt --data "$tmp/g_corpus" --steps 2 --eval-every 0 --threads 1 --checkpoint "$tmp/gpt2.safetensors" >/dev/null 2>"$tmp/err" ||
    fail "wikitext_lm train --model gpt: $(cat "$tmp/err")"
  "${run[@]}" "$lm_bin" eval --checkpoint "$tmp/gpt2.safetensors" --data "$tmp/g_corpus" --split test >"$tmp/out" 2>"$tmp/err" &&
    grep -q "test: .* bits a byte over 929 bytes; word-level perplexity .* 330 tokens" "$tmp/out" ||
    fail "wikitext_lm eval of the GPT: $(cat "$tmp/out" "$tmp/err")"
  "${run[@]}" "$lm_bin" generate --checkpoint "$tmp/gpt2.safetensors" --prompt "w1 w2" --bytes 40 --seed 3 >"$tmp/out" 2>"$tmp/err" &&
    [ "$(head -c 5 "$tmp/out")" = "w1 w2" ] && [ "$(wc -c <"$tmp/out")" -ge 46 ] || fail "wikitext_lm generate with the GPT: $(cat "$tmp/out" "$tmp/err")"
  "${run[@]}" "$lm_bin" quantize --checkpoint "$tmp/gpt2.safetensors" --output "$tmp/gpt2q.safetensors" --data "$tmp/g_corpus" >/dev/null 2>"$tmp/err" &&
    "${run[@]}" "$lm_bin" eval --checkpoint "$tmp/gpt2q.safetensors" --data "$tmp/g_corpus" --split test >"$tmp/out" 2>"$tmp/err" &&
    grep -q "in integers" "$tmp/out" && grep -q "bits a byte over 929 bytes" "$tmp/out" || fail "wikitext_lm quantize and eval of the GPT: $(cat "$tmp/out" "$tmp/err")"
  refuse "gpt2.safetensors holds the GPT over bytes|use generate" "$lm_bin" predict --checkpoint "$tmp/gpt2.safetensors" --context "w1"
  refuse "the test split has 9 bytes|129" "$lm_bin" eval --checkpoint "$tmp/gpt2.safetensors" --data "$tmp/v_corpus" --split test
  echo "ok   wikitext_lm --model gpt: train, eval, generate, quantize; predict and a short split refused"
fi
refuse "not_lm.safetensors|holds no language model" "$lm_bin" predict --checkpoint "$tmp/not_lm.safetensors" --context "w1 w2"
refuse "garbage.safetensors|not a safetensors file|header length" "$lm_bin" eval --checkpoint "$tmp/garbage.safetensors" --data "$tmp/tiny_corpus"
usage_error "--curve|$tmp/absent.csv does not exist" "$lm_bin" plot --curve "$tmp/absent.csv"
keeps "the output $tmp/tiny_corpus/train.txt is the input" "$tmp/tiny_corpus/train.txt" "$lm_bin" train --data "$tmp/tiny_corpus" --steps 1 --checkpoint "$tmp/tiny_corpus/train.txt"
keeps "is the input $tmp/tiny_corpus/valid.txt" "$tmp/tiny_corpus/valid.txt" "$lm_bin" train --data "$tmp/tiny_corpus" --steps 1 --curve "$tmp/tiny_corpus/valid.txt"
keeps "is the input $tmp/pointer.safetensors" "$tmp/pointer.safetensors" "$lm_bin" quantize --checkpoint "$tmp/pointer.safetensors" --output "$tmp/link.safetensors"

echo "== checkpoint_header and the demo"
usage_error "input|$tmp/absent.safetensors does not exist" "$header_bin" "$tmp/absent.safetensors" "$tmp/h.hpp"
refuse "garbage.safetensors|not a safetensors file|header length" "$header_bin" "$tmp/garbage.safetensors" "$tmp/h.hpp"
usage_error "input|/dev/zero is a character device" "$header_bin" /dev/zero "$tmp/h.hpp"
usage_error "input is required" "$header_bin"
usage_error "output|the path is empty" "$header_bin" "$tmp/pointer.safetensors" ""
usage_error "output|does not exist" "$header_bin" "$tmp/pointer.safetensors" "$tmp/no/h.hpp"
usage_error "--namespace|not a C++ identifier" "$header_bin" "$tmp/pointer.safetensors" "$tmp/h.hpp" --namespace 1x
usage_error "--bogus" "$header_bin" "$tmp/pointer.safetensors" "$tmp/h.hpp" --bogus
refuse "takes no arguments" "$demo_bin" --help-me
usage_error "--namespace int|not a C++ identifier" "$header_bin" "$tmp/pointer.safetensors" "$tmp/h.hpp" --namespace int
# --help: exit 0, and the exit codes stated
for cmd in "$mv_bin" "$mv_bin train" "$lm_bin" "$lm_bin eval" "$header_bin" "$demo_bin"; do
  # shellcheck disable=SC2086 # $cmd is a program and its subcommand
  if "${run[@]}" $cmd --help >"$tmp/out" 2>&1 && grep -q "Exit codes" "$tmp/out"; then echo "ok   $cmd --help: exit 0, exit codes stated"
  else fail "$cmd --help: exit code or no 'Exit codes'"; fi
done
usage_error "--model" "$header_bin" "$tmp/pointer.safetensors" "$tmp/h.hpp" --model pointer  # images: stformer-c-api (c_api_any)
if "${run[@]}" "$header_bin" "$tmp/pointer.safetensors" "$tmp/arrays.hpp" --namespace w >"$tmp/out" 2>&1 &&
  grep -qF '{"proj.weight", t' "$tmp/arrays.hpp" && grep -qF "inline constexpr stformer::ConstTensorOf<float> tensors[37]" "$tmp/arrays.hpp"; then
  echo "ok   checkpoint_header: the checkpoint's 37 tensors as arrays"
else fail "checkpoint_header: $(tail -2 "$tmp/out")"; fi

echo "== int8: max_value quantize, eval/predict of the int8 checkpoint, bad int8 files"
q="$tmp/pointer-int8.safetensors"
if "${run[@]}" "$mv_bin" quantize --checkpoint "$tmp/pointer.safetensors" --output "$q" --sets 100 >"$tmp/out" 2>&1 &&
  grep -q "the same choice on" "$tmp/out" && "${run[@]}" "$mv_bin" eval --checkpoint "$q" --sets 10 >"$tmp/out2" 2>&1 &&
  grep -q "int8 (integer forward pass" "$tmp/out2"; then echo "ok   quantize, then eval: $(grep 'same choice' "$tmp/out")"
else fail "max_value quantize / eval: $(tail -2 "$tmp/out") $(tail -2 "$tmp/out2" 2>/dev/null)"; fi
# has_tensors FILE NAME:DTYPE[:SHAPE]...: the safetensors file holds each tensor with that dtype
# (and that shape, its sizes comma-separated).
has_tensors() {
  /usr/bin/python3 - "$@" <<'EOF2'
import json, struct, sys
b = open(sys.argv[1], 'rb').read(); h = json.loads(b[8:8 + struct.unpack('<Q', b[:8])[0]])
for spec in sys.argv[2:]:
    name, dtype, *shape = spec.split(':')
    assert h[name]['dtype'] == dtype and (not shape or h[name]['shape'] == [int(n) for n in shape[0].split(',')]), (name, h[name])
EOF2
}
if "${run[@]}" "$mv_bin" predict --checkpoint "$q" --input "$tmp/sets.safetensors" --output "$tmp/qy.safetensors" >"$tmp/out" 2>&1 &&
  has_tensors "$tmp/qy.safetensors" logits:I32:8,50 x_q:I16:8,50,2 log_probs:F32
then echo "ok   predict with the int8 checkpoint: log_probs, x_q (I16), logits (I32)"
else fail "predict with the int8 checkpoint: $(tail -2 "$tmp/out")"; fi
refuse "pointer-int8.safetensors|already quantized" "$mv_bin" quantize --checkpoint "$q" --output "$tmp/qq.safetensors"
/usr/bin/python3 - "$tmp" <<'EOF2'
import json, struct, sys
d = sys.argv[1]
b = open(d + '/pointer-int8.safetensors', 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n]); data = bytearray(b[8 + n:])
o = h['input.scale']['data_offsets'][0]
data[o:o + 4] = struct.pack('<f', -2.0)
j = b[8:8 + n]
open(d + '/bad-int8.safetensors', 'wb').write(b[:8] + j + bytes(data))
EOF2
refuse "bad-int8.safetensors|'input.scale'|-2" "$mv_bin" eval --checkpoint "$tmp/bad-int8.safetensors"
# the set model: quantize, eval, predict (x_q I16, y_q I16), its int8 image
"${run[@]}" "$mv_bin" train --model set --iterations 1 --checkpoint "$tmp/set.safetensors" >/dev/null 2>&1 || fail "train --model set"
qs="$tmp/set-int8.safetensors"
if "${run[@]}" "$mv_bin" quantize --checkpoint "$tmp/set.safetensors" --output "$qs" --sets 100 >"$tmp/out" 2>&1 &&
  grep -q "mean distance float32 .*, int8 " "$tmp/out" && "${run[@]}" "$mv_bin" eval --checkpoint "$qs" --sets 10 >"$tmp/out2" 2>&1 &&
  grep -q "set model, int8 (integer forward pass" "$tmp/out2"; then echo "ok   set model: quantize, then eval: $(grep 'mean distance float32' "$tmp/out" | cut -d';' -f1)"
else fail "max_value quantize / eval, set model: $(tail -2 "$tmp/out") $(tail -2 "$tmp/out2" 2>/dev/null)"; fi
if "${run[@]}" "$mv_bin" predict --checkpoint "$qs" --input "$tmp/sets.safetensors" --output "$tmp/qsy.safetensors" >"$tmp/out" 2>&1 &&
  has_tensors "$tmp/qsy.safetensors" y_q:I16:8,2 x_q:I16:8,50,2 y:F32:8,2
then echo "ok   predict with the int8 set checkpoint: y, x_q (I16), y_q (I16)"
else fail "predict with the int8 set checkpoint: $(tail -2 "$tmp/out")"; fi
# C arrays (--c): names and sizes, bad names refused
if "${run[@]}" "$header_bin" --c "$q" "$tmp/qp.h" >"$tmp/out" 2>&1 && grep -qF "static const int8_t qp_proj_coarse_weight[32]" "$tmp/qp.h" &&
  grep -qF "#define QP_INPUT_SCALE_SIZE 1" "$tmp/qp.h"; then echo "ok   checkpoint_header --c on the int8 checkpoint: its tensors as C arrays"
else fail "checkpoint_header --c: $(tail -2 "$tmp/out")"; fi
usage_error "a C header|c_api.hpp does not end in .h" "$header_bin" --c "$q" "$tmp/c_api.hpp"
usage_error "file name 2x|not a C identifier" "$header_bin" --c "$q" "$tmp/2x.h"

echo "== info: the forward-only memory plans"
# info_plan PROGRAM ARGS... -- LINES...: exit 0, and stdout holds each line
info_plan() {
  local args=()
  while [ "$1" != "--" ]; do args+=("$1"); shift; done
  shift
  "${run[@]}" "${args[@]}" >"$tmp/out" 2>"$tmp/err" || { fail "$(basename "${args[0]}") ${args[*]:1}: exit code $?"; return; }
  for line in "$@"; do grep -qF -- "$line" "$tmp/out" || { fail "$(basename "${args[0]}") ${args[*]:1}: no '$line'"; return; }; done
  echo "ok   $(basename "${args[0]}") ${args[*]:1}  ->  $(grep sizeof "$tmp/out" | head -1)"
}
info_plan "$mv_bin" info -- "sizeof(InferOf<Net, 1, 50>) = 16000 B" "arena (sizeof InferOf): 16000 B" "blocks" "sn_v" "[1, 1, 50]"
info_plan "$mv_bin" info --model set -- "sizeof(InferOf<Net, 1, 50>)" "isab" "pool" "head"
info_plan "$lm_bin" info -- "sizeof(InferOf<Model, 1>)" "blocks" "pool" "head" "[1, 1, 33278]"
usage_error "--model" "$mv_bin" info --model transformer

# ---- faults during training ---------------------------------------------------------------
# wait_for FILE PATTERN: until FILE holds a line matching PATTERN (up to 600 s).
wait_for() {
  for _ in $(seq 6000); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

echo "== threads: 3 lanes on 1 to 5 threads (more than the cores) give the same checkpoint"
for t in $lane_threads; do
  "${run[@]}" "$mv_bin" train --iterations $lane_iterations --lanes 3 --threads $t --checkpoint "$tmp/lanes3_t$t.safetensors" >"$tmp/out" 2>&1 ||
    fail "train --lanes 3 --threads $t: $(tail -2 "$tmp/out")"
done
grep -q "3 lanes on 3 threads" "$tmp/out" || fail "train --lanes 3 --threads 5 does not say it runs 3 lanes on 3 threads: $(head -3 "$tmp/out")"
same=1
for t in $lane_threads; do cmp -s "$tmp/lanes3_t1.safetensors" "$tmp/lanes3_t$t.safetensors" || { same=0; fail "--lanes 3: --threads $t's checkpoint differs from --threads 1's"; }; done
[ $same = 1 ] && echo "ok   --lanes 3 on --threads ${lane_threads// /, }: one checkpoint, byte for byte"

echo "== SIGINT and SIGTERM: a checkpoint, exit 128 + signal, --resume (on another number of threads) ends as an uninterrupted run"
"${run[@]}" "$mv_bin" train --iterations $iterations --report 1 --lanes 3 --threads 2 --checkpoint "$tmp/straight.safetensors" >/dev/null || fail "uninterrupted run"
for sig in $signals; do
  ck="$tmp/stopped_$sig.safetensors"
  out="$tmp/out_$sig"  # a file of its own: wait_for must not see an earlier run's progress before the shell truncates it
  "${run[@]}" "$mv_bin" train --iterations $iterations --report 1 --lanes 3 --threads 2 --checkpoint "$ck" >"$out" 2>&1 &
  pid=$!
  wait_for "$out" "iteration *2 " || fail "SIG$sig: no progress"
  kill -s "$sig" $pid
  wait $pid
  rc=$?
  code=$((128 + $(kill -l "$sig")))
  stopped=$(grep -o "stopped by signal [0-9]* at iteration [0-9]*" "$out")
  if [ $rc -ne $code ] || [ -z "$stopped" ]; then fail "SIG$sig: exit $rc (expected $code), output: $(tail -2 "$out")"; continue; fi
  "${run[@]}" "$mv_bin" train --resume "$ck" --report 100 --threads 1 >"$tmp/out2" 2>&1 || fail "SIG$sig: --resume failed: $(tail -2 "$tmp/out2")"
  if cmp -s "$ck" "$tmp/straight.safetensors"; then echo "ok   SIG$sig: $stopped, exit $rc; resumed on 1 thread to the 2-thread uninterrupted run's bytes"
  else fail "SIG$sig: the resumed run's checkpoint differs from the uninterrupted run's"; fi
done

echo "== a non-finite loss stops training, naming the step; the last checkpoint stays as it was"
ck="$tmp/diverge.safetensors"
"${run[@]}" "$mv_bin" train --iterations 1 --checkpoint "$ck" >/dev/null || fail "first run"
cp "$ck" "$tmp/before.safetensors"
refuse "step 2: the loss is not finite|training stopped|nothing saved" "$mv_bin" train --iterations 50 --lr 1e30 --checkpoint "$ck"
cmp -s "$ck" "$tmp/before.safetensors" && echo "ok   the previous checkpoint is unchanged" || fail "the checkpoint changed"
"${run[@]}" "$mv_bin" train --iterations 50 --lr 1e30 --save-every 1 --checkpoint "$tmp/every.safetensors" >/dev/null 2>"$tmp/err"
grep -q "step 2: the loss is not finite.*the checkpoint $tmp/every.safetensors of iteration 1 is unchanged" "$tmp/err" &&
  "${run[@]}" "$mv_bin" eval --checkpoint "$tmp/every.safetensors" --sets 10 >/dev/null &&
  echo "ok   with --save-every 1: $(cat "$tmp/err")" || fail "--save-every 1 and a non-finite loss: $(cat "$tmp/err")"

echo "== SIGKILL while a checkpoint is being written leaves the previous one valid"
ck="$tmp/killed.safetensors"
for attempt in $(seq $attempts); do
  "${run[@]}" "$mv_bin" train --model $kill_model --iterations 100000 --save-every 1 --report 1000 --checkpoint "$ck" >/dev/null 2>&1 &
  pid=$!
  seen=0
  deadline=$((SECONDS + 600))
  while [ $SECONDS -lt $deadline ]; do  # until a write is under way (its temporary file exists) after a first save
    if [ -e "$ck" ] && [ -e "$ck.tmp" ]; then kill -KILL $pid; seen=1; break; fi
  done
  [ $seen -eq 1 ] || kill -KILL $pid
  wait $pid 2>/dev/null
  if [ $seen -eq 0 ]; then fail "SIGKILL $attempt: never saw a write under way"; continue; fi
  left=$([ -e "$ck.tmp" ] && echo "a partial $(stat -c %s "$ck.tmp")-byte temporary file left" || echo "the write had just ended")
  if "${run[@]}" "$mv_bin" eval --checkpoint "$ck" --sets 10 >/dev/null 2>"$tmp/err"; then
    echo "ok   SIGKILL $attempt during a write ($left): the checkpoint loads"
  else fail "SIGKILL $attempt: the checkpoint does not load: $(cat "$tmp/err")"; fi
  rm -f "$ck" "$ck.tmp"
done

if [ -n "$wikitext" ] && [ -d "$wikitext" ]; then
  echo "== wikitext_lm on WikiText-2: SIGINT writes a checkpoint that loads; a non-finite loss names the step"
  ck="$tmp/lm.safetensors"
  out="$tmp/out_lm"
  "${run[@]}" "$lm_bin" train --data "$wikitext" --steps 100000 --eval-every 0 --checkpoint "$ck" >"$out" 2>&1 &
  pid=$!
  wait_for "$out" "^step *100 " || fail "wikitext_lm: no progress: $(tail -2 "$out")"
  kill -INT $pid
  wait $pid
  rc=$?
  stopped=$(grep -o "stopped by signal 2 at step [0-9]*" "$out")
  if [ $rc -eq 130 ] && [ -n "$stopped" ] && "${run[@]}" "$lm_bin" predict --checkpoint "$ck" --context "the" --top 3 >/dev/null 2>"$tmp/err"; then
    echo "ok   wikitext_lm SIGINT: $stopped, exit 130, the checkpoint loads"
  else fail "wikitext_lm SIGINT: exit $rc, $(tail -2 "$out") $(cat "$tmp/err" 2>/dev/null)"; fi
  if "${run[@]}" "$lm_bin" quantize --checkpoint "$ck" --output "$tmp/lm-int8.safetensors" >/dev/null 2>"$tmp/err" &&
    "${run[@]}" "$lm_bin" predict --checkpoint "$tmp/lm-int8.safetensors" --context "the" --top 3 >/dev/null 2>"$tmp/err" &&
    grep -q "int8 embedding and head" "$tmp/err"; then echo "ok   wikitext_lm quantize, then predict with int8 embedding and head"
  else fail "wikitext_lm quantize / predict: $(cat "$tmp/err")"; fi
  if "${run[@]}" "$lm_bin" quantize --integer --checkpoint "$ck" --output "$tmp/lm-int.safetensors" --data "$wikitext" >/dev/null 2>"$tmp/err" &&
    "${run[@]}" "$lm_bin" predict --checkpoint "$tmp/lm-int.safetensors" --context "the" --top 3 >/dev/null 2>"$tmp/err" &&
    grep -q "integers from the ids to the logits" "$tmp/err"; then echo "ok   wikitext_lm quantize --integer, then predict with the integer model"
  else fail "wikitext_lm quantize --integer / predict: $(cat "$tmp/err")"; fi
  usage_error "quantize --integer|--data" "$lm_bin" quantize --integer --checkpoint "$ck" --output "$tmp/lm-int2.safetensors"
  # the same checkpoint, said to be trained on 4 lanes: --resume refuses it (the bits would differ)
  /usr/bin/python3 - "$ck" "$tmp/lm_lanes4.safetensors" <<'EOF2'
import json, struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n]); h['__metadata__']['config'] = h['__metadata__']['config'].replace('lanes=2', 'lanes=4')
j = json.dumps(h).encode(); j += b' ' * (-len(j) % 8)
open(sys.argv[2], 'wb').write(struct.pack('<Q', len(j)) + j + b[8 + n:])
EOF2
  refuse "lm_lanes4.safetensors|trained with lanes=4|this build has lanes=2" "$lm_bin" train --data "$wikitext" --steps 1 --resume "$tmp/lm_lanes4.safetensors"
  cp "$ck" "$tmp/lm_before.safetensors"
  refuse "wikitext_lm: step |: the loss is not finite|training stopped|nothing saved" "$lm_bin" train --data "$wikitext" --steps 50 --lr 1e30 --checkpoint "$ck"
  cmp -s "$ck" "$tmp/lm_before.safetensors" && echo "ok   the previous checkpoint is unchanged" || fail "wikitext_lm: the checkpoint changed"
else
  echo "(no WikiText-2 folder, or a slow build: the language model's interruption is not tested)"
fi

if [ $failures -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all passed"
