// stformer kernels' backends — one lane: the vectors of the plain and DSP backends (plain.hpp,
// dsp.hpp), a float and an int32 each, so that the kernels written over vectors run as plain
// loops on any core.
#pragma once

#include "common.hpp"

namespace stformer::inline STFORMER_ABI::kernels {

struct vf {
  float x;
  friend vf operator+(vf a, vf b) { return {a.x + b.x}; }
  friend vf operator-(vf a, vf b) { return {a.x - b.x}; }
  friend vf operator*(vf a, vf b) { return {a.x * b.x}; }
  vf& operator+=(vf b) { x += b.x; return *this; }
  vf& operator*=(vf b) { x *= b.x; return *this; }
};
inline constexpr size_t W = 1;
inline vf load(const float* p) { return {*p}; }
inline void store(float* p, vf v) { *p = v.x; }
inline vf splat(float x) { return {x}; }
inline vf fma(vf a, vf b, vf c) { return {a.x * b.x + c.x}; }
inline vf vmax(vf a, vf b) { return {a.x > b.x ? a.x : b.x}; }
template <bool AtMostZero = false>
inline vf vexp2(vf a) { return {std::exp2(a.x)}; }
inline float hsum(vf a) { return a.x; }
inline float hmax(vf a) { return a.x; }
template <size_t n>
inline void hsums(const vf* v, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = v[i].x;
}
template <size_t n>
inline void hmaxs(const vf* v, float* out) {
  hsums<n>(v, out);
}
inline void transpose_tile(const float* src, size_t, float* dst, size_t) { *dst = *src; }
inline vf in_register(vf v) { return v; }

// One int32 accumulator; Lane gives the backend's apply and name. Always inlined: at -Os GCC
// would otherwise call each of these per entry.
template <class Lane>
struct one_lane_qv {
  std::int32_t v;
  static constexpr size_t G = 1, lanes = 1;
  using qa = std::int8_t;
  using qb = std::int8_t;
  static constexpr std::int32_t a_offset = 0;
  [[gnu::always_inline]] static one_lane_qv dot(one_lane_qv acc, one_lane_qv a, one_lane_qv b) { return {acc.v + a.v * b.v}; }
  [[gnu::always_inline]] static one_lane_qv apply(one_lane_qv x, one_lane_qv q, one_lane_qv shift) { return {Lane::apply(x.v, q.v, shift.v)}; }
  [[gnu::always_inline]] static one_lane_qv clamp_add(one_lane_qv x, std::int32_t zero, std::int32_t lo, std::int32_t hi) { return {clamp_i32(x.v, lo - zero, hi - zero) + zero}; }
  [[gnu::always_inline]] static one_lane_qv broadcast(const qa* a) { return {*a}; }
  [[gnu::always_inline]] static one_lane_qv load(const void* p) { return {*static_cast<const qb*>(p)}; }
  [[gnu::always_inline]] static one_lane_qv load_acc(const std::int32_t* p) { return {*p}; }
  [[gnu::always_inline]] static void store(std::int32_t* p, one_lane_qv x) { *p = x.v; }
  [[gnu::always_inline]] static const char* name() { return Lane::name; }
};
template <class Lane>
[[gnu::always_inline]] inline one_lane_qv<Lane> pinned(one_lane_qv<Lane> x) { return x; }
template <class Out, class Lane>
[[gnu::always_inline]] inline void store_as(Out* y, one_lane_qv<Lane> x) { *y = Out(x.v); }

// The tuning of the one-lane builds: their tiles are the ones their instruction counts on the
// Cortex-M boards were measured with (docs/firmware.md).
inline constexpr Tuning one_lane_tuning{.registers = 16, .nt_chains = 8, .nt_least_cols = 4, .nn_vectors = 4, .nn_rows = {4, 8, 4, 4, 4},
                                        .nn_rows_short = 4, .nn_strips = false, .nt_panels = false, .panel_vectors = 2, .panel_k = 128,
                                        .balance_tail = false, .nt_transposes = false, .stack_panels = 0, .q_panels = false,
                                        .q_panel_vectors = 2, .q_tile_rows = 6, .q_block_k = 256};

}  // namespace stformer::kernels
