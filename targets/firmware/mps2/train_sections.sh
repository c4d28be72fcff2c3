#!/usr/bin/env bash
# train_sections.sh READELF PART QEMU: where the STM32F405 training image's RAM sections lie,
# linked for the part (stm32f405-train.ld) and for QEMU's board (netduinoplus2-train.ld): each
# section's address and size, and a failure unless .data, .bss within the part's 128 KB of
# SRAM at 0x20000000 and .ccm, .stack within its 64 KB of CCM (at 0x10000000 on the part, at
# 0x20020000 under QEMU), with the same sizes in both images.
set -euo pipefail
readelf=$1 part=$2 qemu=$3
sections() {  # NAME ADDRESS SIZE (hex) of the RAM sections of image $1
  "$readelf" -SW "$1" | sed 's/^ *\[ *[0-9]*\] //' | awk '$1 == ".data" || $1 == ".bss" || $1 == ".ccm" || $1 == ".stack" { print $1, $3, $5 }'
}
check() {  # IMAGE CCM_ORIGIN
  local ok=0 name addr size lo hi
  while read -r name addr size; do
    case $name in
      .data|.bss) lo=$((0x20000000)) hi=$((0x20020000)) ;;
      *) lo=$(($2)) hi=$(($2 + 0x10000)) ;;
    esac
    local a=$((0x$addr)) n=$((0x$size))
    printf '  %-7s %6d B at 0x%08x' "$name" "$n" "$a"
    if (( a >= lo && a + n <= hi )); then echo; else echo "  OUTSIDE [0x$(printf %08x $lo), 0x$(printf %08x $hi))"; ok=1; fi
  done < <(sections "$1")
  return $ok
}
status=0
echo "linked for the part ($part):"
check "$part" 0x10000000 || status=1
echo "linked for QEMU's board ($qemu):"
check "$qemu" 0x20020000 || status=1
if [ "$(sections "$part" | awk '{ print $1, $3 }')" != "$(sections "$qemu" | awk '{ print $1, $3 }')" ]; then
  echo "the two images' sections differ in size"
  status=1
fi
[ "$(sections "$part" | wc -l)" -eq 4 ] || { echo "expected .data, .bss, .ccm and .stack"; status=1; }
exit $status
