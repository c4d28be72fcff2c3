// The programs' `info` subcommands: one line per buffer of a forward-only pass (its name,
// shape, bytes and role), read off the types, so that what they print is what sizeof counts.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

// "[1, 50, 16]" for a Tensor type (held on the heap: a logits tensor is large)
template <class T>
std::string shape_of() {
  auto t = std::make_unique<T>();
  std::string s = "[";
  for (size_t d : t->shape()) s += (s.size() > 1 ? ", " : "") + std::to_string(d);
  return s + "]";
}

template <class T>
void print_buffer(const char* indent, const char* name, const char* role) {
  std::printf("%s%-9s %-14s %9zu B  %s\n", indent, name, shape_of<T>().c_str(), sizeof(T), role);
}

// a raw float tile (no shape)
inline void print_tile(const char* indent, size_t bytes, const char* role) { std::printf("%s%-9s %-14s %9zu B  %s\n", indent, "tile", "", bytes, role); }
