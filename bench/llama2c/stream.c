/* stream MB: one core's rate of reading MB megabytes of floats over and over (a float sum in
   four chains, as a matrix-vector product reads its weight), the best of 40 passes: with MB
   above the last-level cache, the memory's rate for one thread; below it, the cache's. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char** argv) {
  if (argc != 2 || atol(argv[1]) <= 0) return fprintf(stderr, "usage: stream MB\n"), 2;
  const size_t n = (size_t)atol(argv[1]) << 18;  /* floats */
  float* x = aligned_alloc(64, n * sizeof(float));
  if (!x) return 1;
  for (size_t i = 0; i < n; ++i) x[i] = 1e-9f * (float)(i % 1000);
  double best = 1e9, total = 0;
  for (int pass = 0; pass < 40; ++pass) {
    const double t0 = now();
    float s[32] = {0};
    for (size_t i = 0; i < n; i += 32)
      for (int j = 0; j < 32; ++j) s[j] += x[i + j];
    for (int j = 0; j < 32; ++j) total += s[j];
    const double dt = now() - t0;
    if (pass >= 4 && dt < best) best = dt;
  }
  printf("%.1f GB/s (%zu MB a pass in %.2f ms; %g)\n", (double)(n * sizeof(float)) / best / 1e9, (size_t)atol(argv[1]), best * 1e3, total);
  return 0;
}
