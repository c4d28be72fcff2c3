# stformer-tools.sh: what stformer's commands (stformer-c-api, stformer-quantize, stformer-firmware)
# share, read by them with `.`: the line in which a header stformer_export.py wrote names its
# model, and compiling a host program against stformer. POSIX sh.

# stformer_marker HEADER: sets marker_type, marker_rows, marker_causal and marker_keys (true or
# false) from HEADER's line "// stformer-c-api: --type NAME --rows N [--causal] [--keys]" (--keys:
# exported with a key mask); empty and false without one.
stformer_marker() {
  marker_type="" marker_rows="" marker_causal=false marker_keys=false
  [ -f "$1" ] || return 0
  # shellcheck disable=SC2046
  set -- $(sed -n 's|^// stformer-c-api: ||p' "$1" | head -1)
  while [ $# -gt 0 ]; do
    case "$1" in
      --type) marker_type=${2:-}; shift 2 ;;
      --rows) marker_rows=${2:-}; shift 2 ;;
      --causal) marker_causal=true; shift ;;
      --keys) marker_keys=true; shift ;;
      *) shift ;;
    esac
  done
}

# stformer_quote WORD: WORD in single quotes, for a command the shell reads again.
stformer_quote() {
  printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"
}

# stformer_compile TOOL WHAT PROGRAM SOURCE...: compiles and links SOURCE... into PROGRAM with
# $stformer_command (a whole compiler command with its flags and libraries, read as the shell
# reads a command), or, when it is empty, with $CXX (default c++) and pkg-config's stformer-io;
# and the flags $stformer_flags, if set.
# The libraries of the command (-l..., .a files) come again after the sources, which need them:
# a linker reads a library for the objects before it. On failure: the compiler's errors, then
# "TOOL: ..." saying whether the link or WHAT failed; returns 1.
stformer_compile() {
  tool=$1 what=$2 program=$3
  shift 3
  command=$stformer_command libs=""
  if [ -z "$command" ]; then
    flags=$(pkg-config --cflags stformer-io) && libs=$(pkg-config --libs stformer-io) ||
      { echo "$tool: pkg-config knows no stformer-io: give --compile" >&2; return 2; }
    command="${CXX:-c++} -O1 $flags"
  fi
  command="$command ${stformer_flags:-}"
  for word in $command; do
    case "$word" in -l* | *.a) libs="$libs $word" ;; esac
  done
  errors="$program.errors"
  if ! eval "$command \"\$@\" -o \"\$program\" $libs" 2>"$errors"; then
    cat "$errors" >&2
    if grep -q "undefined reference\|undefined symbol" "$errors"; then
      echo "$tool: the host program does not link (above): give the libraries it needs (stformer_io) in --compile" >&2
    else
      echo "$tool: $what (above)" >&2
    fi
    return 1
  fi
}
