/* Stand-alone driver of `prezero bench ar` (tools/bench_ar.c) for builds of the AR donor alone
 * (bench/ar/build.sh), independent of the rest of the CLI. */
#include "cli.h"
int main(int argc, char **argv) { return pz_cmd_bench_ar(argc, argv); }
