/* prezero bench_gemm: placeholder until its issue lands. */
#include <stdio.h>
#include "cli.h"
int pz_cmd_bench_gemm(int argc, char **argv) {
  fprintf(stderr, "prezero: 'bench_gemm' is not available in this build yet\n");
  return 1;
}
