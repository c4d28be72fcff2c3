// Output and exit through Arm semihosting (bkpt 0xAB), with no C library stdio (newlib's
// printf would bring malloc). Numbers are formatted here: integers, and floats with a fixed
// number of decimals.
#pragma once

#include <cstddef>
#include <cstdint>

namespace semihosting {

inline int call(int op, const void* arg) {
  register int r0 asm("r0") = op;
  register const void* r1 asm("r1") = arg;
  asm volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}

inline void write(const char* s) { call(0x04, s); }  // SYS_WRITE0

// SYS_EXIT: QEMU exits with status 0 for ADP_Stopped_ApplicationExit, 1 for anything else.
[[noreturn]] inline void exit(bool ok) {
  call(0x18, reinterpret_cast<const void*>(ok ? 0x20026 : 0x20023));
  for (;;) {
  }
}

inline void write(std::uint64_t v) {
  char text[24], *p = text + sizeof text;
  *--p = '\0';
  do *--p = char('0' + v % 10), v /= 10;
  while (v != 0);
  write(p);
}

// v with `decimals` digits after the point (|v| < 1.8e19), rounded half away from zero.
inline void write(float v, int decimals) {
  double x = v;
  if (x < 0) write("-"), x = -x;
  std::uint64_t scale = 1;
  for (int i = 0; i < decimals; ++i) scale *= 10;
  std::uint64_t fixed = std::uint64_t(x * double(scale) + 0.5);
  write(fixed / scale);
  write(".");
  char digits[24];
  for (int i = decimals - 1; i >= 0; --i) digits[i] = char('0' + fixed % 10), fixed /= 10;
  digits[decimals] = '\0';
  write(digits);
}

std::size_t stack_used();  // startup.cpp

}  // namespace semihosting
