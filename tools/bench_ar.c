/* prezero bench_ar: placeholder until its issue lands. */
#include <stdio.h>
#include "cli.h"
int pz_cmd_bench_ar(int argc, char **argv) {
  fprintf(stderr, "prezero: 'bench_ar' is not available in this build yet\n");
  return 1;
}
