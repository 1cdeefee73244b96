/* Stand-alone driver of `prezero bench gemm` for building the benchmark alone on the GPU
 * machine (bench/gemm/device.sh), without the rest of the CLI. */
#include "cli.h"
int main(int argc, char **argv) { return pz_cmd_bench_gemm(argc, argv); }
