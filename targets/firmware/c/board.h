/* What the C firmware's programs (main.c, generation.c) share on QEMU's netduinoplus2
   (STM32F405): output and the exit status through semihosting, and the reset code (board.c),
   which calls the program's firmware_run and ends the run with its result. */
#ifndef FIRMWARE_BOARD_H
#define FIRMWARE_BOARD_H

#include <stdint.h>

void put(const char* s);     /* text to the host's standard output */
void put_number(uint32_t v); /* in decimal */
void __attribute__((noreturn)) stop(int ok);

/* The program: nonzero when every check passed. */
int firmware_run(void);

#endif
