// Reset for a bare-metal Cortex-M: vector table (SysTick's wraps counted for instructions.hpp),
// .data copied from flash, .bss zeroed, the FPU enabled, static constructors run, then
// firmware_main; the stack is painted first so that main can measure its high-water mark.
// Semihosting (bkpt 0xAB) carries the output and the exit code to the debugger, here
// qemu-system-arm -semihosting.
#include <cstddef>
#include <cstdint>
#include <ios>

#include "instructions.hpp"
#include "semihosting.hpp"

extern "C" {
extern std::uint32_t data_start[], data_end[], data_load[], bss_start[], bss_end[], stack_bottom[], stack_top[];
extern void (*init_array_start[])();
extern void (*init_array_end[])();
int firmware_main();  // main.cpp (ISO C++ does not let a program call main itself)
[[noreturn]] void reset_handler();
[[noreturn]] void fault_handler() { semihosting::exit(false); }
void systick_handler() { instructions::wraps = instructions::wraps + 1; }
}

volatile std::uint32_t instructions::wraps = 0;

// xtensor's headers include <iostream>, whose static std::ios_base::Init object would build the
// standard streams and bring in the iostream library and malloc. The firmware never uses them.
std::ios_base::Init::Init() {}
std::ios_base::Init::~Init() {}

// std::abort (stformer::fail on bad input without exceptions): newlib's would raise a signal,
// whose table it allocates with malloc. Here it ends the run with a failure status.
extern "C" [[noreturn]] void abort() {
  semihosting::write("abort\n");
  semihosting::exit(false);
}

// errno, which newlib's math functions set: its own __errno returns a field of the C library's
// per-thread state (_impure_ptr, 1 KB of .data), which the firmware needs for nothing else.
extern "C" int* __errno() {
  static int e = 0;
  return &e;
}

// Static objects are never destroyed (the firmware does not return): no exit-time list.
void* __dso_handle = nullptr;
extern "C" int __cxa_atexit(void (*)(void*), void*, void*) { return 0; }

namespace semihosting {
std::uint32_t stack_paint = 0x5EED5EEDu;
}

__attribute__((section(".vectors"), used)) void (*const vectors[16])() = {
    reinterpret_cast<void (*)()>(stack_top), reset_handler, fault_handler, fault_handler, fault_handler,
    fault_handler, fault_handler, nullptr, nullptr, nullptr, nullptr, fault_handler, fault_handler, nullptr,
    fault_handler, systick_handler};

extern "C" [[noreturn]] void reset_handler() {
  for (std::uint32_t *s = data_load, *d = data_start; d < data_end;) *d++ = *s++;
  for (std::uint32_t* d = bss_start; d < bss_end;) *d++ = 0;
  // paint the stack below the current frame (this function's own few words stay at the top)
  std::uint32_t* sp;
  asm volatile("mov %0, sp" : "=r"(sp));
  for (std::uint32_t* p = stack_bottom; p < sp - 16;) *p++ = semihosting::stack_paint;
#if defined(__ARM_FP)
  // CPACR: full access to coprocessors 10 and 11 (the FPU)
  *reinterpret_cast<volatile std::uint32_t*>(0xE000ED88u) |= 0xFu << 20;
  asm volatile("dsb\n isb" ::: "memory");
#endif
  for (auto* f = init_array_start; f < init_array_end; ++f) (*f)();
  semihosting::exit(firmware_main() == 0);
}

std::size_t semihosting::stack_size() { return std::size_t(reinterpret_cast<const char*>(stack_top) - reinterpret_cast<const char*>(stack_bottom)); }

// Bytes of the stack ever written since reset (the painted words that changed).
std::size_t semihosting::stack_used() {
  const std::uint32_t* p = stack_bottom;
  while (p < stack_top && *p == stack_paint) ++p;
  return std::size_t(reinterpret_cast<const char*>(stack_top) - reinterpret_cast<const char*>(p));
}
