/* The C firmware's board (board.h): semihosting and the reset code of QEMU's netduinoplus2. */
#include "board.h"

/* ---- semihosting (bkpt 0xAB): output and exit status to qemu-system-arm -semihosting ---- */

static int semihost(int op, const void* arg) {
  register int r0 __asm__("r0") = op;
  register const void* r1 __asm__("r1") = arg;
  __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}

void put(const char* s) { semihost(0x04, s); } /* SYS_WRITE0 */

void put_number(uint32_t v) {
  char text[12], *p = text + sizeof text;
  *--p = '\0';
  do *--p = (char)('0' + v % 10), v /= 10;
  while (v != 0);
  put(p);
}

void __attribute__((noreturn)) stop(int ok) {
  semihost(0x18, (const void*)(ok ? 0x20026 : 0x20023)); /* SYS_EXIT: application exit, or an error */
  for (;;) {
  }
}

/* ---- reset: .data copied from flash, .bss zeroed, the FPU on, static constructors (those of
   the models' C++ sources), then the program ---- */

extern uint32_t data_start[], data_end[], data_load[], bss_start[], bss_end[];
void stack_top(void); /* the linker script's top of the stack, declared as a function: the vector table's first entry */
extern void (*init_array_start[])(void);
extern void (*init_array_end[])(void);

/* errno for newlib's math functions, without the C library's 1 KB per-thread state */
int* __errno(void) {
  static int e;
  return &e;
}

static void __attribute__((noreturn)) fault(void) { stop(0); }

/* a failed check of the library (STFORMER_CHECK: never reached, the C API refuses bad input
   first) ends the run as a failure, without newlib's signal machinery */
void __attribute__((noreturn)) abort(void) { stop(0); }

void __attribute__((noreturn)) reset_handler(void) { /* the linker script's entry */
  for (uint32_t *s = data_load, *d = data_start; d < data_end;) *d++ = *s++;
  for (uint32_t* d = bss_start; d < bss_end;) *d++ = 0;
  *(volatile uint32_t*)0xE000ED88u |= 0xFu << 20; /* CPACR: the FPU (coprocessors 10 and 11) */
  __asm__ volatile("dsb\n isb" ::: "memory");
  for (void (**f)(void) = init_array_start; f < init_array_end; ++f) (*f)();
  stop(firmware_run());
}

__attribute__((section(".vectors"), used)) static void (*const vectors[16])(void) = {
    stack_top, reset_handler, fault, fault, fault, fault, fault, 0, 0, 0, 0, fault, fault, 0, fault, fault};
