// stformer kernels' backends — what the two x86 backends (avx2.hpp, avx512.hpp) share: values
// pinned in registers, the grouped horizontal reductions, and the AVX2 instructions both run for
// int16 rows (i16_rows8) and for packing int8 panels (pack_words).
#pragma once

#include "xsimd.hpp"

#include <immintrin.h>

namespace stformer::inline STFORMER_ABI::kernels {

// v, kept in a register. A register tile loads each vector of B once and multiplies it into
// several rows' accumulators; GCC may instead fold that load into each of those FMAs as a memory
// operand, loading it again for every row (a 4 × 2 tile: 12 loads for 8 FMAs instead of 6), more
// than the load ports of an AVX2 core such as Zen 3 sustain beside two FMAs a cycle. The empty asm
// makes v a value in a register, so it is loaded once. It changes no result.
inline vf in_register(vf v) {
  asm("" : "+v"(v.data));
  return v;
}
// The same for the int8 tile (int8.hpp's q_tile): its vectors of B are loaded once, and its
// accumulators stay where they are instead of being copied between registers every step.
template <class Q>
inline Q pinned(Q x) {
  asm("" : "+v"(x.v));
  return x;
}

namespace x86 {

// The sum of a vector of 8 floats by halves (128, 64, 32 bits): the order of avx2.hpp's and
// avx512.hpp's reduce_group, so that hsums of a group and hsum of one vector give the same bits.
inline float hsum8(__m256 h) {
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_add_ss(q, _mm_shuffle_ps(q, q, 1)));
}

// out[i] = one(v[i]) for i < n, whole groups of W vectors in one transposing reduction,
// group(v + i) (each step combines halves of two vectors: 45 operations for 16 vectors of 16
// instead of 8 per vector); a remainder of at least W/4 is padded to a group.
template <size_t n, class Group, class One>
inline void hreduce(const vf* v, float* out, Group group, One one) {
  size_t i = 0;
  for (; i + W <= n; i += W) store(out + i, group(v + i));
  if constexpr (n % W >= W / 4) {
    vf pad[W];
    for (size_t k = 0; k < W; ++k) pad[k] = v[i + (k < n % W ? k : 0)];
    float r[W];
    store(r, group(pad));
    for (size_t k = 0; k < n % W; ++k) out[i + k] = r[k];
  } else {
    for (; i < n; ++i) out[i] = one(v[i]);
  }
}

// The 8 sums of the 8 int32 lanes of a[0..7], as one vector: hsum(a[r]) in lane r.
inline __m256i hsums8(const __m256i* a) {
  const __m256i s01 = _mm256_hadd_epi32(a[0], a[1]), s23 = _mm256_hadd_epi32(a[2], a[3]);
  const __m256i s45 = _mm256_hadd_epi32(a[4], a[5]), s67 = _mm256_hadd_epi32(a[6], a[7]);
  const __m256i s0123 = _mm256_hadd_epi32(s01, s23), s4567 = _mm256_hadd_epi32(s45, s67);  // [lo halves | hi halves]
  return _mm256_add_epi32(_mm256_permute2x128_si256(s0123, s4567, 0x20), _mm256_permute2x128_si256(s0123, s4567, 0x31));
}

// One int16 row a [K] against 8 int8 rows of B: c[r] = bias[r] + Σ_k a[k]·B[r, k]. B's rows are
// widened to int16 as they are read (vpmovsxbw), 16 products per vpmaddwd (vpdpwssd with
// AVX-512 VNNI) into int32 pairs, the 8 accumulators summed at the end (hsums8); the last K % 16
// entries one by one. Exact, as the plain loop (|pair| ≤ 2·128·32768 < 2^31). B's rows are
// asked for 16 KB ahead: one row through a large weight (a language model's head) is bound by
// reading it, as matmul_nt's nt_tile. Always inlined into dot_rows's loops: GCC leaves it out of
// line where a QLinear step runs in tiles of columns, and there each call is markedly slower.
template <size_t K>
[[gnu::always_inline]] inline void i16_rows8(const std::int16_t* a, const std::int8_t* B, size_t ldb, std::int32_t* c, const std::int32_t* bias) {
  constexpr size_t K16 = K / 16 * 16;
  __m256i acc[8];
  for (auto& v : acc) v = _mm256_setzero_si256();
  for (size_t k = 0; k < K16; k += 16) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + k));
    for (size_t r = 0; r < 8; ++r) {
      if (k % 64 == 0) __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(B + r * ldb + k) + 16384));
      const __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(B + r * ldb + k)));
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
      acc[r] = _mm256_dpwssd_epi32(acc[r], w, x);
#else
      acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(w, x));
#endif
    }
  }
  alignas(32) std::int32_t s[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(s), hsums8(acc));
  for (size_t r = 0; r < 8; ++r) {
    for (size_t k = K16; k < K; ++k) s[r] += std::int32_t(a[k]) * std::int32_t(B[r * ldb + k]);
    c[r] = s[r] + (bias ? bias[r] : 0);
  }
}

}  // namespace x86

// int16 rows of A (K ≥ 16): 8 rows of B at a time (int8 rows take int8.hpp's panels).
template <size_t M, size_t N, size_t K, class TA>
inline size_t dot_rows(const TA* A, size_t lda, const std::int8_t* B, size_t ldb, std::int32_t* C, size_t ldc, const std::int32_t* bias) {
  if constexpr (std::is_same_v<TA, std::int16_t> && K >= 16) {
    for (size_t i = 0; i < M; ++i)
      for (size_t j = 0; j + 8 <= N; j += 8) x86::i16_rows8<K>(A + i * lda, B + j * ldb, ldb, C + i * ldc + j, bias ? bias + j : nullptr);
    return N / 8 * 8;
  }
  return 0;
}

// int8.hpp's pack_panel, 8 columns × 8 groups at a time, where a group (G entries of QB) is one
// 32-bit word: an 8 × 8 transpose of words in AVX2 registers (int16 entries widened as they are
// read). Returns the columns and groups it packed.
template <size_t NP, class QB>
inline PackedPart pack_words(const std::int8_t* B, size_t ldb, size_t cols, size_t kn, QB* panel) {
  constexpr size_t G = 4 / sizeof(QB);
  if constexpr (NP % 8 != 0) {
    return {};
  } else {
    size_t j = 0;
    const size_t g8 = kn / (8 * G) * 8;  // groups done 8 at a time
    for (; j + 8 <= cols; j += 8)
      for (size_t g = 0; g < g8; g += 8) {
        __m256i r[8], t[8], u[8];
        for (size_t c = 0; c < 8; ++c) {  // column j + c's 8 groups as 8 words
          const std::int8_t* b = B + (j + c) * ldb + g * G;
          if constexpr (sizeof(QB) == 2)
            r[c] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
          else
            r[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
        }
        for (size_t c = 0; c < 8; c += 2) t[c] = _mm256_unpacklo_epi32(r[c], r[c + 1]), t[c + 1] = _mm256_unpackhi_epi32(r[c], r[c + 1]);
        for (size_t c = 0; c < 8; c += 4)
          for (size_t h = 0; h < 2; ++h)
            u[c + h] = _mm256_unpacklo_epi64(t[c + h], t[c + h + 2]), u[c + h + 2] = _mm256_unpackhi_epi64(t[c + h], t[c + h + 2]);
        // u[0 … 3]: groups (0, 4), (2, 6), (1, 5), (3, 7) of columns 0 … 3 (low and high halves); u[4 … 7] of columns 4 … 7
        constexpr int order[4] = {0, 2, 1, 3};
        for (size_t q = 0; q < 4; ++q) {
          const __m256i lo = _mm256_permute2x128_si256(u[order[q]], u[4 + order[q]], 0x20);
          const __m256i hi = _mm256_permute2x128_si256(u[order[q]], u[4 + order[q]], 0x31);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(panel + ((g + q) * NP + j) * G), lo);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(panel + ((g + q + 4) * NP + j) * G), hi);
        }
      }
    return {j, g8};
  }
}

}  // namespace stformer::kernels
