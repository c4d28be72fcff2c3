// stformer kernels — the matrix products of the blocks, over raw row-major pointers with
// leading dimensions (ld = floats between consecutive rows), sizes known at compile time.
//
//   matmul_nt: C[M,N]  = alpha · A[M,K] · B[N,K]ᵀ (+ bias[N])   x·Wᵀ (Linear, ReLU fused or not)
//   matmul_nn: C[M,N] (+)= A[M,K] · B[K,N]                      q·kᵀ (kᵀ transposed), A·v, dy·W
//   matmul_tn: C[M,N] (+)= A[K,M]ᵀ · B[K,N]                     dyᵀ·x (weight gradients)
//   transpose: dst = srcᵀ                                        kᵀ for the scores, panels of Bᵀ
//
// All work in register tiles of fused multiply-add (fma) chains, their loops over rows and
// vectors written out at compile time (unrolled, backend/common.hpp), so that the accumulators
// are registers at -O2 and -Os too: matmul_nt broadcasts A's entries against packed panels of
// Bᵀ, takes Cᵀ = B·Aᵀ by the nn tiles for 2W to 32 rows, or for fewer rows accumulates dot
// products along K and reduces them at the end; matmul_nn/tn broadcast A[i,k] against rows of
// B (rows_per_tile).
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <cstdint>

#include "vec.hpp"

namespace stformer::inline STFORMER_ABI::kernels {

// dst[c·ldd + r] = src[r·lds + c] for r < rows, c < C: a [rows, C] block transposed, W × W tiles
// in registers (transpose_tile), the edges element by element.
template <size_t C>
inline void transpose(const float* src, size_t lds, size_t rows, float* dst, size_t ldd) {
  constexpr size_t CW = W > 1 ? C / W * W : 0;  // columns in whole tiles
  const size_t RW = W > 1 ? rows / W * W : 0;     // rows in whole tiles
  for (size_t r = 0; r < RW; r += W) {
    for (size_t c = 0; c < CW; c += W) transpose_tile(src + r * lds + c, lds, dst + c * ldd + r, ldd);
    for (size_t c = CW; c < C; ++c)
      for (size_t i = 0; i < W; ++i) dst[c * ldd + r + i] = src[(r + i) * lds + c];
  }
  for (size_t r = RW; r < rows; ++r)
    for (size_t c = 0; c < C; ++c) dst[c * ldd + r] = src[r * lds + c];
}

namespace detail {

template <size_t R, size_t C, size_t K, bool Relu>
inline void nt_tile(const float* A, size_t lda, const float* B, size_t ldb, float* Cm, size_t ldc,
                    float alpha, const float* bias) {
  vf acc[R][C];
  for (size_t r = 0; r < R; ++r)
    for (size_t c = 0; c < C; ++c) acc[r][c] = splat(0.0f);
  constexpr size_t KV = K / W * W;  // K rounded down to whole vectors
  for (size_t k = 0; k < KV; k += W) {
    vf a[R];
    unrolled<R>([&](auto r) __attribute__((always_inline)) { a[r] = in_register(load(A + r * lda + k)); });
    unrolled<C>([&](auto c) __attribute__((always_inline)) {
      vf b = in_register(load(B + c * ldb + k));
      // One row against many rows of B (the LM head's 17 MB for one window) is bound by
      // reading B from memory: a tile that reads several rows of B at once asks for them 16 KB
      // ahead, more lines in flight than the hardware prefetcher keeps for its interleaved
      // streams. (An address, not a pointer past B's end: a prefetch never faults.) One row of
      // B at a time (tuning.nt_one_row_cols = 1) is one stream, which the prefetcher follows.
      if constexpr (R == 1 && C > 1 && W > 1) __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(B + c * ldb + k) + 16384));
      unrolled<R>([&](auto r) __attribute__((always_inline)) { acc[r][c] = fma(a[r], b, acc[r][c]); });
    });
  }
  float sums[R * C];
  hsums<R * C>(&acc[0][0], sums);
  for (size_t r = 0; r < R; ++r)
    for (size_t c = 0; c < C; ++c) {
      float s = sums[r * C + c];
      for (size_t kk = KV; kk < K; ++kk) s += A[r * lda + kk] * B[c * ldb + kk];
      const float y = alpha * s + (bias ? bias[c] : 0.0f);
      Cm[r * ldc + c] = Relu && !(y > 0.0f) ? 0.0f : y;
    }
}

// C[M,N] by dot products along K, in tiles of TR rows of A × TC rows of B: tuning.nt_chains
// chains, TC at least tuning.nt_least_cols (AVX-512: 4 × 4, 2 × 8, 1 × 16; AVX2: 4 × 2, 2 × 4,
// 1 × 8, so that the accumulators, A's TR vectors and B's fit its 16 registers); one row of A
// (M = 1: a decoding step) against tuning.nt_one_row_cols rows of B where the backend gives it
// (x86: 1, B read as one stream: the rows' chains are independent, and out-of-order execution
// overlaps them; each row's sum is the same whatever TC, and so are its bits);
// the rows of B are the outer loop, so that B (a large weight) streams through once while A
// stays in cache.
template <size_t M, size_t N, size_t K, bool Relu>
inline void nt_dots(const float* A, size_t lda, const float* B, size_t ldb, float* C, size_t ldc, float alpha,
                    const float* bias) {
  constexpr size_t TR = M < 4 ? M : 4,
                   TC = M == 1 && tuning.nt_one_row_cols ? tuning.nt_one_row_cols : std::max(tuning.nt_chains / TR, tuning.nt_least_cols);
  auto rows = [&]<size_t Cn>(size_t j) {
    size_t i = 0;
    for (; i + TR <= M; i += TR) nt_tile<TR, Cn, K, Relu>(A + i * lda, lda, B + j * ldb, ldb, C + i * ldc + j, ldc, alpha, bias ? bias + j : nullptr);
    if constexpr (M % TR != 0)
      nt_tile<M % TR, Cn, K, Relu>(A + i * lda, lda, B + j * ldb, ldb, C + i * ldc + j, ldc, alpha, bias ? bias + j : nullptr);
  };
  size_t j = 0;
  for (; j + TC <= N; j += TC) rows.template operator()<TC>(j);
  if constexpr (N % TC != 0) rows.template operator()<N % TC>(j);
}

// R rows × NV vectors of columns of C (+)= op(A) · B, where op(A)[r, k] = A[r·ars + k·aks]
// (ars = lda, aks = 1 for A; ars = 1, aks = lda for Aᵀ).
template <size_t R, size_t NV, size_t K, bool Acc>
[[gnu::noinline]] inline void nn_tile(const float* A, size_t ars, size_t aks, const float* B, size_t ldb, float* C, size_t ldc) {
  vf acc[R][NV];
  for (size_t r = 0; r < R; ++r)
    for (size_t v = 0; v < NV; ++v) acc[r][v] = Acc ? load(C + r * ldc + v * W) : splat(0.0f);
  for (size_t k = 0; k < K; ++k) {
    vf b[NV];
    unrolled<NV>([&](auto v) __attribute__((always_inline)) { b[v] = in_register(load(B + k * ldb + v * W)); });
    unrolled<R>([&](auto r) __attribute__((always_inline)) {
      const vf a = splat(A[r * ars + k * aks]);
      unrolled<NV>([&](auto v) __attribute__((always_inline)) { acc[r][v] = fma(a, b[v], acc[r][v]); });
    });
  }
  for (size_t r = 0; r < R; ++r)
    for (size_t v = 0; v < NV; ++v) store(C + r * ldc + v * W, acc[r][v]);
}

// Vectors per nn tile (R·TV accumulators, TV of B and A's broadcast must fit the registers).
inline constexpr size_t nn_vectors = tuning.nn_vectors;

template <size_t R, size_t N, size_t K, bool Acc>
inline void nn_rows(const float* A, size_t ars, size_t aks, const float* B, size_t ldb, float* C, size_t ldc) {
  constexpr size_t TV = nn_vectors, full = N / W;
  size_t v = 0;
  for (; v + TV <= full; v += TV) nn_tile<R, TV, K, Acc>(A, ars, aks, B + v * W, ldb, C + v * W, ldc);
  if constexpr (full % TV != 0) nn_tile<R, full % TV, K, Acc>(A, ars, aks, B + v * W, ldb, C + v * W, ldc);
  for (size_t j = full * W; j < N; ++j)  // columns past the last full vector
    for (size_t r = 0; r < R; ++r) {
      float s = Acc ? C[r * ldc + j] : 0.0f;
      for (size_t k = 0; k < K; ++k) s += A[r * ars + k * aks] * B[k * ldb + j];
      C[r * ldc + j] = s;
    }
}

// Rows per register tile when a tile is `vectors` vectors wide (at most nn_vectors) and K long:
// enough independent multiply-add chains to keep both vector pipes busy, within the registers
// (the backend's table: AVX-512's tiles 4 vectors wide take 6 rows, 24 accumulators as the
// panels, at any K; elsewhere short chains, K < 32, measured faster in 4-row tiles).
// Each entry of C is the same chain of multiply-adds along K whatever the tile, so the tile
// sizes do not change any result.
constexpr size_t rows_per_tile(size_t vectors, size_t K) {
  if (K < 32 && tuning.nn_rows_short) return tuning.nn_rows_short;
  return tuning.nn_rows[vectors];
}

template <size_t M, size_t N, size_t K, bool Acc>
inline void nn_block(const float* A, size_t ars, size_t aks, const float* B, size_t ldb, float* C, size_t ldc) {
  constexpr size_t TR = rows_per_tile(std::min(N / W, nn_vectors), K);
  size_t i = 0;
  for (; i + TR <= M; i += TR) nn_rows<TR, N, K, Acc>(A + i * ars, ars, aks, B, ldb, C + i * ldc, ldc);
  if constexpr (M % TR != 0) nn_rows<M % TR, N, K, Acc>(A + i * ars, ars, aks, B, ldb, C + i * ldc, ldc);
}

// Wide products over many rows (tuning.nn_strips: AVX2; N ≥ 128, M ≥ 24, K ≥ 64): B taken a strip of
// nn_vectors·W columns at a time, copied contiguous (at most 256 × 16 floats, 16 KB), and every
// row tile run over the strip.
// Read in place, a strip of a B whose rows are a power of two apart (512 B at N = 128, 2 KB at
// N = 512) is one line per row, all in a few of the L1 cache's sets, and evicts itself between
// row tiles. Each entry of C is the same chain along K, so this changes no result.
template <size_t M, size_t N, size_t K>
inline constexpr bool by_strips = tuning.nn_strips && M >= 24 && K >= 64 && N % (nn_vectors * W) == 0 && N >= 128;

// Long K (a weight gradient sums over every row of the batch) is taken in chunks of KC, so that
// the chunk of A and B stays in cache while every tile of C passes over it (the first chunk
// starts C from 0 unless Acc, later ones add to it).
template <size_t M, size_t N, size_t K, bool Acc>
inline void nn_any(const float* A, size_t ars, size_t aks, const float* B, size_t ldb, float* C, size_t ldc) {
  constexpr size_t KC = 256;
  auto chunks = [](auto&& chunk) {  // chunk.template operator()<KB, Acc>(k0) over [0, K)
    if constexpr (K <= KC) {
      chunk.template operator()<K, Acc>(0);
    } else {
      chunk.template operator()<KC, Acc>(0);
      size_t k = KC;
      for (; k + KC <= K; k += KC) chunk.template operator()<KC, true>(k);
      if constexpr (K % KC != 0) chunk.template operator()<K % KC, true>(k);
    }
  };
  if constexpr (by_strips<M, N, K>) {
    constexpr size_t NS = nn_vectors * W;
    alignas(64) float strip[(K < KC ? K : KC) * NS];
    for (size_t s = 0; s < N; s += NS)
      chunks([&]<size_t KB, bool Ac>(size_t k0) {
        for (size_t k = 0; k < KB; ++k) std::copy_n(B + (k0 + k) * ldb + s, NS, strip + k * NS);
        nn_block<M, NS, KB, Ac>(A + k0 * aks, ars, aks, strip, NS, C + s, ldc);
      });
  } else {
    chunks([&]<size_t KB, bool Ac>(size_t k0) { nn_block<M, N, KB, Ac>(A + k0 * aks, ars, aks, B + k0 * ldb, ldb, C, ldc); });
  }
}

}  // namespace detail

namespace detail {

// Rows × NV vectors of C = alpha · A · P + bias over one block of K, P a packed panel [K, NV·W]
// of Bᵀ (zero beyond the last column). The first block of K starts from 0, later ones from the
// sums stored in C; the last applies alpha and the bias (a sum is stored and reloaded exactly,
// so the blocking changes no result). Only the first `cols` columns are read and written.
template <size_t R, size_t NV, size_t K, bool First, bool Last, bool Relu>
inline void panel_tile(const float* A, size_t lda, const float* P, float* C, size_t ldc, float alpha, const float* bias_panel,
                       size_t cols) {
  constexpr size_t NP = NV * W;
  vf acc[R][NV];
  for (size_t r = 0; r < R; ++r) {
    if constexpr (First) {
      for (size_t v = 0; v < NV; ++v) acc[r][v] = splat(0.0f);
    } else {
      float row[NP] = {};
      const float* c = C + r * ldc;
      if (cols < NP) std::copy_n(c, cols, row), c = row;
      for (size_t v = 0; v < NV; ++v) acc[r][v] = load(c + v * W);
    }
  }
  for (size_t k = 0; k < K; ++k) {
    vf b[NV];
    unrolled<NV>([&](auto v) __attribute__((always_inline)) { b[v] = in_register(load(P + k * NP + v * W)); });
    unrolled<R>([&](auto r) __attribute__((always_inline)) {
      const vf a = splat(A[r * lda + k]);
      unrolled<NV>([&](auto v) __attribute__((always_inline)) { acc[r][v] = fma(a, b[v], acc[r][v]); });
    });
  }
  const vf al = splat(alpha);
  for (size_t r = 0; r < R; ++r) {
    float row[NP];
    float* c = cols == NP ? C + r * ldc : row;
    for (size_t v = 0; v < NV; ++v) {
      vf y = Last ? fma(acc[r][v], al, load(bias_panel + v * W)) : acc[r][v];
      store(c + v * W, Last && Relu ? vmax(y, splat(0.0f)) : y);
    }
    if (cols < NP) std::copy_n(row, cols, C + r * ldc);
  }
}

// panel[k·NP + j] = B[j·ldb + k] for j < cols, k < K, and 0 for cols ≤ j < NP.
template <size_t K, size_t NP>
inline void pack_panel(const float* B, size_t ldb, size_t cols, float* panel) {
  transpose<K>(B, ldb, cols, panel, NP);
  if (cols < NP)
    for (size_t k = 0; k < K; ++k) std::fill(panel + k * NP + cols, panel + (k + 1) * NP, 0.0f);
}

}  // namespace detail

// matmul_nt's vector path packs Bᵀ in panels of NP columns (NP/W vectors: tuning.panel_vectors,
// fewer for narrow outputs), zero beyond column N. `packs<Of>`: a product of Of rows takes that path.
template <size_t Of>
inline constexpr bool packs = tuning.nt_panels && Of >= 8;
template <size_t N>
inline constexpr size_t panel_width = std::min<size_t>((N + W - 1) / W, tuning.panel_vectors) * W;

// Bᵀ [K, N] in matmul_nt's panels, packed once for a product taken in several calls (the row
// tiles of a forward-only layer): panel j holds columns [j·NP, (j+1)·NP) as [K, NP], so that a
// block of K starting at k0 is at p + j·K·NP + k0·NP, as matmul_nt packs it.
template <size_t N, size_t K>
struct PanelsNT {
  static constexpr size_t NP = panel_width<N>, count = (N + NP - 1) / NP;
  alignas(64) float p[count * K * NP];

  void pack(const float* B, size_t ldb) {
    for (size_t j = 0; j < count; ++j)
      detail::pack_panel<K, NP>(B + j * NP * ldb, ldb, N - j * NP < NP ? N - j * NP : NP, p + j * K * NP);
  }
};

// Few rows (Of ≤ 32: one window's rows through a block's projections): packing B's N·K entries
// costs more than transposing A's M·K and C's M·N, so Cᵀ = B · Aᵀ is taken by the nn tiles
// (B's entries broadcast against rows of Aᵀ, its M columns padded to whole vectors), NC rows of B
// at a time, alpha and the bias applied to Cᵀ's rows, then transposed into C. Each entry is the
// same chain of multiply-adds along K as on the panels, and the same fma with alpha and the bias:
// the same bits. Where tuning.nt_transposes (x86), from 2 vectors of rows (one was slower than
// the panels), with Aᵀ at most 64 KB on the stack.
template <size_t Of, size_t N, size_t K>
inline constexpr bool transposes = tuning.nt_transposes && Of <= 32 && Of >= 2 * W && Of * (N + K) < N * K && K * 32 <= 16384;

namespace detail {

template <size_t M, size_t N, size_t K, bool Relu>
inline void nt_transposed(const float* A, size_t lda, const float* B, size_t ldb, float* C, size_t ldc, float alpha,
                          const float* bias) {
  constexpr size_t MP = (M + W - 1) / W * W, NC = N < 64 ? N : 64;
  alignas(64) float at[K * MP];  // Aᵀ [K, MP], zero past column M: A packed as a panel
  pack_panel<K, MP>(A, lda, M, at);
  alignas(64) float ct[NC * MP];  // Cᵀ for rows [j0, j0 + NC) of B
  const vf al = splat(alpha);
  auto chunk = [&]<size_t NB>(size_t j0) {
    nn_any<NB, MP, K, false>(B + j0 * ldb, ldb, 1, at, MP, ct, MP);
    for (size_t j = 0; j < NB; ++j) {
      const vf b = splat(bias ? bias[j0 + j] : 0.0f);
      for (size_t i = 0; i < MP; i += W) {
        const vf y = fma(load(ct + j * MP + i), al, b);
        store(ct + j * MP + i, Relu ? vmax(y, splat(0.0f)) : y);
      }
    }
    transpose<M>(ct, MP, NB, C + j0, ldc);
  };
  size_t j0 = 0;
  for (; j0 + NC <= N; j0 += NC) chunk.template operator()<NC>(j0);
  if constexpr (N % NC != 0) chunk.template operator()<N % NC>(j0);
}

}  // namespace detail

// C[M,N] = alpha · A[M,K] · B[N,K]ᵀ (+ bias[N]), then max(·, 0) when Relu (FeedForward's first
// layer, fused). Vector builds pack Bᵀ in panels of NP columns and at most KC rows of K (on the
// stack: 32 KB with AVX-512, 128 rows of 64 floats, and with AVX2, 512 rows of 16; it stays in
// the L1 cache while every row of A passes over it, and fewer blocks of K mean fewer passes over
// C), or read them from `panels` (B packed beforehand), and broadcast A's entries against them,
// 6 or 7 rows at a time (24 accumulators with AVX-512), which needs no horizontal sums. The
// one-lane build and very few rows (M < 8: one window's row through the 33,278-word head, where
// packing B would cost more than the product) take dot products along K instead, and 2W to 32
// rows the transposed product (transposes) unless given `panels`. Packing by register
// transposes costs about a quarter of a 32-row product.
// Of: the rows of the whole product when these M rows are one tile of it (forward-only passes
// take a layer's rows in tiles). The path is chosen by Of, and every entry of C is one chain of
// multiply-adds along K on every path whatever the tile, so a tile's entries have the same bits
// as the whole product's.
template <size_t M, size_t N, size_t K, bool Relu = false, size_t Of = M>
inline void matmul_nt(const float* A, size_t lda, const float* B, size_t ldb, float* C, size_t ldc, float alpha = 1.0f,
                      const float* bias = nullptr, const PanelsNT<N, K>* panels = nullptr) {
  if constexpr (!packs<Of>) {
    detail::nt_dots<M, N, K, Relu>(A, lda, B, ldb, C, ldc, alpha, bias);
  } else {
    if constexpr (transposes<Of, N, K>)
      if (!panels) return detail::nt_transposed<M, N, K, Relu>(A, lda, B, ldb, C, ldc, alpha, bias);
    constexpr size_t NPused = panel_width<N>, NVused = NPused / W, TR = 6, KCmax = tuning.panel_k, KC = K < KCmax ? K : KCmax, NB = K / KC, KT = K % KC;
    // The rows past the last whole tile go one each into the first tiles when those still fit
    // the registers (accumulators, B's vectors, A's broadcast): a short last tile has too few
    // independent chains to hide the multiply-add latency.
    constexpr bool spread = M % TR != 0 && M % TR <= M / TR && (TR + 1) * NVused + NVused + 1 <= tuning.registers;
    // Otherwise, where tuning.balance_tail (AVX2), a last tile of 1–3 rows and the whole tile
    // before it are taken as two tiles of 3–5 rows (32 rows as 6, 6, 6, 6, 4, 4 rather than 6, 6,
    // 6, 6, 6, 2; with AVX-512 a 2-row tile still has 8 chains, and this measured slower).
    constexpr bool balance = !spread && tuning.balance_tail && M % TR != 0 && M % TR < 4 && M > TR;
    alignas(64) float local[KC * NPused];
    alignas(64) float bias_panel[NPused];
    for (size_t j0 = 0; j0 < N; j0 += NPused) {
      size_t cols = N - j0 < NPused ? N - j0 : NPused;
      for (size_t j = 0; j < NPused; ++j) bias_panel[j] = bias && j < cols ? bias[j0 + j] : 0.0f;
      // one block of K: [k0, k0 + KB)
      auto block = [&]<size_t KB, bool First, bool Last>(size_t k0) {
        const float* panel = local;
        if (panels)
          panel = panels->p + j0 * K + k0 * NPused;
        else
          detail::pack_panel<KB, NPused>(B + j0 * ldb + k0, ldb, cols, local);
        auto tile = [&]<size_t R>(size_t i) {
          detail::panel_tile<R, NVused, KB, First, Last, Relu>(A + i * lda + k0, lda, panel, C + i * ldc + j0, ldc, alpha, bias_panel, cols);
        };
        size_t i = 0;
        if constexpr (spread) {
          for (size_t t = 0; t < M % TR; ++t, i += TR + 1) tile.template operator()<TR + 1>(i);
          for (; i < M; i += TR) tile.template operator()<TR>(i);
        } else if constexpr (balance) {
          for (; i + TR + M % TR < M; i += TR) tile.template operator()<TR>(i);
          tile.template operator()<(TR + M % TR + 1) / 2>(i);
          tile.template operator()<(TR + M % TR) / 2>(i + (TR + M % TR + 1) / 2);
        } else {
          for (; i + TR <= M; i += TR) tile.template operator()<TR>(i);
          if constexpr (M % TR != 0) tile.template operator()<M % TR>(i);
        }
      };
      if constexpr (NB == 1 && KT == 0) {
        block.template operator()<K, true, true>(0);
      } else {
        block.template operator()<KC, true, false>(0);
        for (size_t b = 1; b + 1 < NB; ++b) block.template operator()<KC, false, false>(b * KC);
        if constexpr (KT == 0) {
          block.template operator()<KC, false, true>((NB - 1) * KC);
        } else {
          if constexpr (NB > 1) block.template operator()<KC, false, false>((NB - 1) * KC);
          block.template operator()<KT, false, true>(NB * KC);
        }
      }
    }
  }
}

// Outputs narrower than a vector (N < W: the input gradient and weight gradient of a
// projection from 2-D points) would leave the tiles nothing but their scalar tail; they are
// computed transposed instead (below), so that the long side runs along the vectors.
template <size_t M, size_t N>
constexpr bool narrow = W > 1 && N < W && M >= W;

// C[M,N] (+)= A[M,K] · B[K,N]   (narrow: dot products of A's rows with B's columns, Bᵀ copied)
template <size_t M, size_t N, size_t K, bool Accumulate = false>
inline void matmul_nn(const float* A, size_t lda, const float* B, size_t ldb, float* C, size_t ldc) {
  if constexpr (narrow<M, N> && !Accumulate && K * N <= 4096) {  // Bᵀ on the stack
    alignas(64) float bt[N * K];
    transpose<N>(B, ldb, K, bt, K);
    detail::nt_dots<M, N, K, false>(A, lda, bt, K, C, ldc, 1.0f, nullptr);
  } else {
    detail::nn_any<M, N, K, Accumulate>(A, lda, 1, B, ldb, C, ldc);
  }
}

// C[M,N] (+)= A[K,M]ᵀ · B[K,N]   (weight gradients dW += dyᵀ x; dV += Aᵀ dO; dK += dSᵀ Q)
// (narrow: Cᵀ = Bᵀ · A along M, then added transposed)
template <size_t M, size_t N, size_t K, bool Accumulate = true>
inline void matmul_tn(const float* A, size_t lda, const float* B, size_t ldb, float* C, size_t ldc) {
  if constexpr (narrow<M, N> && M * N <= 4096) {  // Cᵀ on the stack
    alignas(64) float ct[N * M];
    detail::nn_any<N, M, K, false>(B, 1, ldb, A, lda, ct, M);
    for (size_t i = 0; i < M; ++i)
      for (size_t j = 0; j < N; ++j) C[i * ldc + j] = (Accumulate ? C[i * ldc + j] : 0.0f) + ct[j * M + i];
  } else {
    detail::nn_any<M, N, K, Accumulate>(A, 1, lda, B, ldb, C, ldc);
  }
}

// y[N] += Σ_r x[r, N]   (bias gradients)
template <size_t Rows, size_t N>
inline void add_column_sums(const float* x, float* y) {
  constexpr size_t full = N / W * W;
  for (size_t r = 0; r < Rows; ++r, x += N) {
    for (size_t j = 0; j < full; j += W) store(y + j, load(y + j) + load(x + j));
    for (size_t j = full; j < N; ++j) y[j] += x[j];
  }
}

}  // namespace stformer::kernels
