# ort_lib.sh, read with `.` by bench/onnxruntime/run.sh and tests/torch/onnx_ort.sh (bash).
# ort_lib OUT VERSION: sets LIB to ONNX Runtime's shared library: $ORT_LIB when given, else the one
# in onnxruntime-node@VERSION from npm (its package holds the CPU library, for x86_64 and aarch64),
# installed into OUT/npm when missing or of another version (npm install --ignore-scripts: the
# package's install script downloads GPU libraries). Exits 2 for a missing tool, 1 for a failed
# install.
ort_lib() {
  local out=$1 version=$2 arch installed
  if [ -n "${ORT_LIB:-}" ]; then
    [ -f "$ORT_LIB" ] || { echo "ORT_LIB $ORT_LIB: no such file" >&2; exit 2; }
    LIB=$(realpath "$ORT_LIB")
    return
  fi
  case $(uname -m) in
    x86_64) arch=x64 ;;
    aarch64) arch=arm64 ;;
    *) echo "onnxruntime-node has no library for $(uname -m) (x86_64, aarch64); give one in ORT_LIB" >&2; exit 2 ;;
  esac
  LIB=$out/npm/node_modules/onnxruntime-node/bin/napi-v6/linux/$arch/libonnxruntime.so.1
  installed=$(sed -n 's/^ *"version": "\(.*\)",$/\1/p' "$out/npm/node_modules/onnxruntime-node/package.json" 2> /dev/null | head -1 || true)
  if [ ! -f "$LIB" ] || [ "$installed" != "$version" ]; then
    command -v npm > /dev/null || { echo "npm not found (Debian 12: apt-get install npm), or give ONNX Runtime's library in ORT_LIB" >&2; exit 2; }
    echo "npm install onnxruntime-node@$version into $out/npm" >&2
    mkdir -p "$out/npm"
    npm install --prefix "$out/npm" --ignore-scripts --no-audit --no-fund --no-save "onnxruntime-node@$version" >&2
    [ -f "$LIB" ] || { echo "onnxruntime-node@$version has no $LIB" >&2; exit 1; }
  fi
}
