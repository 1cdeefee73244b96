/* Stand-alone driver of `prezero bench moe` for building the benchmark alone on the GPU
 * machine (bench/moe/device.sh), without the rest of the CLI. */
#include "cli.h"
int main(int argc, char **argv) { return pz_cmd_bench_moe(argc, argv); }
