/* `ferry bench`: placeholder until the benchmark lands. */
#include "tool.h"

#include <stdio.h>

int ferry_bench_main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "ferry bench: not built yet\n");
  return 1;
}
