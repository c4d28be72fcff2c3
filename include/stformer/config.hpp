// stformer — the build configuration, checked, and the ABI tag that names it.
//
// The tensors' alignment and the kernels' vector width are fixed by three settings that every
// translation unit using stformer must share:
//   STFORMER_SIMD=1 or 0      the xsimd kernels, or plain C++ ones
//   XTENSOR_USE_XSIMD         (with STFORMER_SIMD=1) tensors aligned to the SIMD width
//   -march=...                the instruction set: x86-64-v3 (AVX2), x86-64-v4 (AVX-512), none on aarch64 (NEON)
// meson's dependency('stformer'), `pkg-config --cflags stformer` and CMake's stformer::stformer
// give all three (and -ffp-contract=off, which keeps results independent of the compiler's
// own fusing of multiply-adds).
//
// Everything stformer declares lives in an inline namespace named after these settings
// (stformer::abi_simd_avx2, stformer::abi_scalar_plain, ...). Code still says stformer::X, but
// two objects built with different settings no longer agree on a name: a model defined in one
// and used from the other fails to link instead of being read with another layout.
#pragma once

#if !defined(__cplusplus) || __cplusplus < 202002L
#error "stformer needs C++20: compile with -std=c++20 (GCC 11 or later, Clang 14 or later)"
#endif

#ifndef STFORMER_SIMD
#error "STFORMER_SIMD is not defined. Compile every file that includes stformer with the same flags, from `pkg-config --cflags stformer`, CMake's stformer::stformer or meson's dependency('stformer'); by hand: -DSTFORMER_SIMD=1 -DXTENSOR_USE_XSIMD -march=x86-64-v3 -ffp-contract=off (AVX2; -march=x86-64-v4 for AVX-512, no -march on aarch64), or -DSTFORMER_SIMD=0 -ffp-contract=off (plain C++, no xsimd)"
#endif

#if STFORMER_SIMD && !defined(XTENSOR_USE_XSIMD)
#error "STFORMER_SIMD=1 needs -DXTENSOR_USE_XSIMD too: the SIMD kernels read tensors aligned to the vector width"
#endif

#if STFORMER_SIMD
#define STFORMER_ABI_KERNELS simd
#else
#define STFORMER_ABI_KERNELS scalar
#endif

// The tensors' alignment follows xsimd's widest instruction set when XTENSOR_USE_XSIMD is set.
#if !defined(XTENSOR_USE_XSIMD)
#define STFORMER_ABI_ARCH plain
#elif defined(__AVX512F__)
#define STFORMER_ABI_ARCH avx512
#elif defined(__AVX2__) && defined(__FMA__)
#define STFORMER_ABI_ARCH avx2
#elif defined(__AVX__)
#define STFORMER_ABI_ARCH avx
#elif defined(__ARM_NEON)
#define STFORMER_ABI_ARCH neon
#elif defined(__SSE2__)
#define STFORMER_ABI_ARCH sse2
#else
#define STFORMER_ABI_ARCH generic
#endif

// Helium, Armv8.1-M's vector extension with floating point (Cortex-M55), runs the plain
// build's kernels: vf is its four-float vector (kernels/vec.hpp), and the int8 products and
// requantization use its integer instructions (kernels/int8.hpp). -DSTFORMER_HELIUM=0 keeps
// the one-lane kernels. Tensors keep the plain build's layout.
#if !defined(STFORMER_HELIUM)
#if !STFORMER_SIMD && defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 2)
#define STFORMER_HELIUM 1
#else
#define STFORMER_HELIUM 0
#endif
#endif

// The integer passes' row tiles: STFORMER_QTILE_ROWS (64 by default) caps a quantized block's
// default tile and its least tile in a plan (precision.hpp: qtile_rows, qtile_least;
// more rows where a plan leaves room). A microcontroller may take fewer, for a smaller
// workspace (-DSTFORMER_QTILE_ROWS=1 on a Cortex-M0). It sets the passes' sizes, so a build that
// sets it has an ABI tag of its own (abi_scalar_plain_t1, ...): every object, libstformer_io.a
// too, built with the same value.
#define STFORMER_ABI_JOIN2(k, a) abi_##k##_##a
#define STFORMER_ABI_JOIN(k, a) STFORMER_ABI_JOIN2(k, a)
#define STFORMER_ABI_JOIN3(k, a, t) abi_##k##_##a##_t##t
#define STFORMER_ABI_JOIN_T(k, a, t) STFORMER_ABI_JOIN3(k, a, t)
// The inline namespace: stformer::STFORMER_ABI.
#ifdef STFORMER_QTILE_ROWS
#define STFORMER_ABI STFORMER_ABI_JOIN_T(STFORMER_ABI_KERNELS, STFORMER_ABI_ARCH, STFORMER_QTILE_ROWS)
#else
#define STFORMER_QTILE_ROWS 64
#define STFORMER_ABI STFORMER_ABI_JOIN(STFORMER_ABI_KERNELS, STFORMER_ABI_ARCH)
#endif
#if STFORMER_QTILE_ROWS < 1
#error "STFORMER_QTILE_ROWS must be at least 1 (rows per tile)"
#endif
