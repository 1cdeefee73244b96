/* Stand-alone driver of `prezero bench attn` (tools/bench_attn.c) for building the MLA benchmark
 * alone on the GPU machine (bench/attn/device.sh), without the rest of the CLI. */
#include "cli.h"
int main(int argc, char **argv) { return pz_cmd_bench_attn(argc, argv); }
