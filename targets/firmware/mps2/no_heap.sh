#!/bin/sh
# no_heap.sh NM IMAGE: the linked image defines no heap allocator (malloc, free, operator new,
# newlib's _malloc_r and _sbrk).
set -e
found=$("$1" -C "$2" | grep -E ' (malloc|free|calloc|realloc|_malloc_r|_free_r|_sbrk|_sbrk_r|operator new.*|operator delete.*)$' || true)
if [ -n "$found" ]; then
  echo "the image has a heap allocator:"; echo "$found"; exit 1
fi
echo "no heap allocator in $2"
