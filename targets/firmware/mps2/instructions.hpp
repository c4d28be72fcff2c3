// Instructions executed, as QEMU counts them under `-icount shift=8`: its virtual clock then
// advances exactly 2^8 ns per guest instruction, and SysTick, clocked by the core at the
// board's frequency F (BOARD_HZ: 16 MHz micro:bit, 25 MHz MPS2, 168 MHz STM32F405), counts
// r = F · 256 / 10^9 ticks per instruction (4.096 to 43.0). With r > 2, a span of t ticks holds
// round(t / r) instructions exactly. These are instructions, not cycles: QEMU models no
// pipeline, cache or wait state.
//
// SysTick is 24 bits wide; its interrupt counts the wraps (every 2^24 ticks: 390,000
// instructions at 168 MHz), so a span's count includes the handler's few instructions per wrap.
// check() measures loops of known lengths first and says whether QEMU runs with that -icount.
#pragma once

#include <cstdint>

#include "semihosting.hpp"

namespace instructions {

constexpr unsigned shift = 8;  // the -icount shift this arithmetic assumes

extern volatile std::uint32_t wraps;  // startup.cpp's SysTick handler

inline volatile std::uint32_t* const systick = reinterpret_cast<volatile std::uint32_t*>(0xE000E010u);  // CSR, RVR, CVR

// SysTick free-running on the processor clock, its wrap interrupt on.
inline void start() {
  systick[0] = 0;
  systick[1] = 0xFFFFFFu;
  systick[2] = 0;
  wraps = 0;
  systick[0] = 0x7;  // ENABLE | TICKINT | CLKSOURCE = processor
}

// Ticks since start().
inline std::uint64_t ticks() {
  std::uint32_t w, v;
  do {
    w = wraps;
    v = systick[2];
  } while (w != wraps);
  return (std::uint64_t(w) << 24) + (0xFFFFFFu - v);
}

// The instructions in t ticks.
inline std::uint64_t of(std::uint64_t t) {
  const std::uint64_t per = std::uint64_t(BOARD_HZ) << shift;  // ticks per 10^9 instructions
  return (t * 1'000'000'000u + per / 2) / per;
}

// The instructions between two reads of the counter around a loop of n subtractions and
// branches: 2n plus a constant of the core's.
inline std::uint64_t loop(std::uint32_t n) {
  std::uint32_t before, after;
  asm volatile(
      ".syntax unified\n"
      "ldr %0, [%3]\n"
      "1: subs %2, %2, #1\n"
      "bne 1b\n"
      "ldr %1, [%3]\n"
      : "=&l"(before), "=&l"(after), "+l"(n)
      : "l"(systick + 2)
      : "cc", "memory");
  return of((before - after) & 0xFFFFFFu);
}

// Whether 5,000 more turns of that loop count as 10,000 more instructions: QEMU runs with
// -icount shift=8. (Within one: on the Cortex-M55 a read of the counter may land one
// instruction early or late, as QEMU ends its translation block there.)
inline bool check() {
  const std::uint64_t d = loop(6000) - loop(1000);
  return d + 1 >= 10000 && d <= 10001;
}

// "instructions per WHAT: least to most" for the spans measured, or how to count them.
inline void report(const char* what, bool counted, std::uint64_t least, std::uint64_t most) {
  using semihosting::write;
  write("instructions per "), write(what);
  if (!counted) return write(": not counted (run qemu-system-arm with -icount shift=8)\n");
  write(" (QEMU -icount shift=8): "), write(least);
  if (most != least) write(" to "), write(most);
  write("\n");
}

}  // namespace instructions
