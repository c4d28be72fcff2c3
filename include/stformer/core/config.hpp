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
#if !STFORMER_SIMD && defined(XTENSOR_USE_XSIMD)
#error "STFORMER_SIMD=0 builds without xsimd: leave XTENSOR_USE_XSIMD undefined (the plain build's tensors are not aligned to a vector width)"
#endif

// The kernels' backend: one file in kernels/backend/ holds its vector types, its register tiles
// and its tuning table, and every kernel is written once against them. Chosen here, from the
// settings above and the compiler's target:
//   avx512   STFORMER_SIMD=1, AVX-512 F/BW/DQ/VL (x86-64-v4), with VNNI where the CPU has it
//   avx2     STFORMER_SIMD=1, AVX2 and FMA (x86-64-v3)
//   neon     STFORMER_SIMD=1 on aarch64, with the dot-product extension where the target has it
//   helium   STFORMER_SIMD=0, Armv8.1-M's vector extension with floating point (Cortex-M55)
//   dsp      STFORMER_SIMD=0, Armv7E-M's DSP instructions (Cortex-M4, M7)
//   plain    STFORMER_SIMD=0 anywhere else (Cortex-M0, any host): one-lane C++
// -DSTFORMER_HELIUM=0 and -DSTFORMER_ARM_DSP=0 ask for the plain backend on those cores (the same
// results: every backend computes the same integers, and the float kernels the same sums).
// Helium and DSP keep the plain build's tensor layout and ABI tag.
#define STFORMER_BACKEND_PLAIN 0
#define STFORMER_BACKEND_DSP 1
#define STFORMER_BACKEND_HELIUM 2
#define STFORMER_BACKEND_NEON 3
#define STFORMER_BACKEND_AVX2 4
#define STFORMER_BACKEND_AVX512 5
#if STFORMER_SIMD
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__) && defined(__FMA__)
#define STFORMER_BACKEND STFORMER_BACKEND_AVX512
#define STFORMER_BACKEND_FILE "backend/avx512.hpp"
#elif defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#define STFORMER_BACKEND STFORMER_BACKEND_AVX2
#define STFORMER_BACKEND_FILE "backend/avx2.hpp"
#elif defined(__ARM_NEON) && defined(__aarch64__)
#define STFORMER_BACKEND STFORMER_BACKEND_NEON
#define STFORMER_BACKEND_FILE "backend/neon.hpp"
#else
#error "STFORMER_SIMD=1 needs AVX2 and FMA (-march=x86-64-v3), AVX-512 F/BW/DQ/VL (-march=x86-64-v4) or aarch64's NEON; -DSTFORMER_SIMD=0 builds the plain C++ kernels for any other target"
#endif
#elif defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 2) && (!defined(STFORMER_HELIUM) || STFORMER_HELIUM)
#define STFORMER_BACKEND STFORMER_BACKEND_HELIUM
#define STFORMER_BACKEND_FILE "backend/helium.hpp"
#elif defined(__ARM_FEATURE_DSP) && (!defined(STFORMER_ARM_DSP) || STFORMER_ARM_DSP)
#define STFORMER_BACKEND STFORMER_BACKEND_DSP
#define STFORMER_BACKEND_FILE "backend/dsp.hpp"
#else
#define STFORMER_BACKEND STFORMER_BACKEND_PLAIN
#define STFORMER_BACKEND_FILE "backend/plain.hpp"
#endif
// Which of the two Cortex-M backends runs, as 0 or 1 (when not set on the command line).
#if !defined(STFORMER_HELIUM)
#define STFORMER_HELIUM (STFORMER_BACKEND == STFORMER_BACKEND_HELIUM)
#endif
#if !defined(STFORMER_ARM_DSP)
#define STFORMER_ARM_DSP (STFORMER_BACKEND == STFORMER_BACKEND_DSP)
#endif
// The ABI tag's parts: the tensors' alignment (xsimd's widest instruction set with
// XTENSOR_USE_XSIMD) and the kernels.
#if STFORMER_SIMD
#define STFORMER_ABI_KERNELS simd
#else
#define STFORMER_ABI_KERNELS scalar
#endif
#if STFORMER_BACKEND == STFORMER_BACKEND_AVX512
#define STFORMER_ABI_ARCH avx512
#elif STFORMER_BACKEND == STFORMER_BACKEND_AVX2
#define STFORMER_ABI_ARCH avx2
#elif STFORMER_BACKEND == STFORMER_BACKEND_NEON
#define STFORMER_ABI_ARCH neon
#else
#define STFORMER_ABI_ARCH plain
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
