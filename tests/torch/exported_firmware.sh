# exported_firmware.sh, read by exported_c_api.sh --firmware (DIR in $dir, OUT_DIR in $out, the
# compiler in $cxx, stformer_io in $out/libio.a): models the exporter traced quantized by
# src/stformer-quantize on their calibration inputs and built into firmware by
# src/stformer-firmware, each run on QEMU against the host's C API on test inputs (the command
# fails unless the board's outputs are the host's):
#   the Keyword Transformer KWT-1 in int8 on the STM32F405;
#   torchvision's ViT in int8 on the micro:bit (Cortex-M0, no FPU);
#   the nanoGPT-style model (token ids, causal) in int8 on the Cortex-M7;
#   the BERT-style model exported with a key mask in int8 on the Cortex-M4 and in float on the
#   STM32F405, each test input with its own.
# Then the commands' refusals of bad input, each message checked.
src=$here/../../src
compile="$cxx -O1 -pthread -L$out -lio"
quantize() {  # quantize NAME: NAME_int8.safetensors from its 32 calibration inputs
  sh "$src/stformer-quantize" "$dir/$1.hpp" "$dir/$1.safetensors" "$dir/$1.inputs.safetensors" "$out/$1_int8.safetensors" \
    --tensor calibration --compile "$compile"
}
firmware() {  # firmware NAME CHECKPOINT BOARD OPTIONS...: two test inputs on the board
  name=$1 checkpoint=$2 board=$3
  shift 3
  sh "$src/stformer-firmware" --header "$dir/$name.hpp" --checkpoint "$checkpoint" --name "$name" --inputs "$dir/$name.inputs.safetensors" \
    --tensor test --count 2 --board "$board" --out "$out" --compile "$compile" "$@"
}
quantize kwt
firmware kwt "$out/kwt_int8.safetensors" f405 --int8
quantize tvit
firmware tvit "$out/tvit_int8.safetensors" microbit --int8
quantize gpt
firmware gpt "$out/gpt_int8.safetensors" m7 --int8
quantize pbert
firmware pbert "$out/pbert_int8.safetensors" m4 --int8
firmware pbert "$dir/pbert.safetensors" f405

# refusals: each message names the problem
refused() {  # refused MESSAGE COMMAND...: COMMAND fails and says MESSAGE
  if "$@" >"$out/refused.log" 2>&1; then
    echo "accepted, but should have refused: $*" >&2
    exit 1
  fi
  grep -qF -e "$1" "$out/refused.log" || { echo "refused without \"$1\": $*" >&2; cat "$out/refused.log" >&2; exit 1; }
  echo "refused: $1"
}
refused "holds no tensor nothing" sh "$src/stformer-quantize" "$dir/tvit.hpp" "$dir/tvit.safetensors" "$dir/tvit.inputs.safetensors" \
  "$out/bad.safetensors" --tensor nothing --compile "$compile"
refused "the model reads token ids (I32 or I64)" sh "$src/stformer-quantize" "$dir/gpt.hpp" "$dir/gpt.safetensors" "$dir/tvit.inputs.safetensors" \
  "$out/bad.safetensors" --tensor calibration --compile "$compile"
refused "is an integer model already" sh "$src/stformer-quantize" "$dir/tvit.hpp" "$out/tvit_int8.safetensors" "$dir/tvit.inputs.safetensors" \
  "$out/bad.safetensors" --tensor calibration --type "stformer::Quantized<tvit>" --rows 96 --compile "$compile"
refused "has no FPU: give an integer model" firmware tvit "$dir/tvit.safetensors" microbit
refused "--board pc: one of m4, m7, m55, f405, microbit" firmware tvit "$dir/tvit.safetensors" pc
test ! -e "$out/bad.safetensors" || { echo "a refused quantization wrote its output" >&2; exit 1; }
echo "exported models in firmware: the host's outputs on every board; every bad input refused"
