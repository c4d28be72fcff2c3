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

// The phase of a model's encoder blocks: EncoderBlock::Work (a, then the attention's buffers or
// the hidden rows).
template <class Work>
void print_encoder_work(const char* in) {
  using Attention = typename decltype(Work::phase)::template Phase<0>;
  using Hidden = typename decltype(Work::phase)::template Phase<1>;
  std::printf("  blocks  %zu B\n", sizeof(Work));
  print_buffer<decltype(Work::a)>(in, "a", "SN1(h) -> q -> heads -> attention output; SN2(h) -> feed-forward output");
  std::printf("%sthen %zu B: the attention's keys and values and its tile\n", in, sizeof(Attention));
  print_buffer<decltype(Attention::kt)>(in, "kt", "k_h^T of every head");
  print_buffer<decltype(Attention::v)>(in, "v", "values");
  print_tile(in, sizeof(Attention::tile), "scores of 16 queries, or a tile of rows of a projection");
  std::printf("%sthen:\n", in);
  print_buffer<Hidden>(in, "hidden", "a tile of rows of the feed-forward hidden layer");
}

// The phase of a PMA with one seed: MAB::Work on the folded path.
template <class Pool>
void print_pool_work(const char* in) {
  std::printf("  pool    %zu B (PMA, one seed: the attention folds, no keys or values are projected)\n", sizeof(Pool));
  print_buffer<decltype(Pool::a)>(in, "a", "Nq(seed) -> attention output -> Nff(h) -> fc");
  print_buffer<decltype(Pool::y1)>(in, "y1", "Nkv(x), the keys");
  print_buffer<decltype(Pool::attn.qk)>(in, "qk", "q_h Wk_h of every head");
  print_buffer<decltype(Pool::attn.a)>(in, "A", "attention weights");
  print_buffer<decltype(Pool::attn.ax)>(in, "ax", "A x");
}
