#!/bin/sh
# no_soft_float.sh NM IMAGE: the linked image holds no floating-point emulation routine (the
# EABI's __aeabi_f*/__aeabi_d*, libgcc's __addsf3, __muldf3, __floatsisf, __fixdfsi ...): on a
# core without an FPU, the int8 forward pass runs in integers only.
set -e
found=$("$1" "$2" | grep -E ' __aeabi_[fd]|__(add|sub|mul|div|neg)[sd]f3$|__(float|fix|extend|trunc)[a-z]*[sd]f[a-z0-9]*$|__(eq|ne|lt|le|gt|ge|un|cmp)[sd]f2$' || true)
if [ -n "$found" ]; then
  echo "the image has soft-float routines:"; echo "$found"; exit 1
fi
echo "no soft-float routine in $2"
