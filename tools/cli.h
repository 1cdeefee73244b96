/* prezero CLI subcommands. Each returns the process exit code (0 ok, 1 error, 2 usage);
 * errors are printed as one line "prezero <cmd>: <what is wrong>; <how to fix>". */
#ifndef PZ_TOOLS_CLI_H
#define PZ_TOOLS_CLI_H
/* argv[0] is skipped (the subcommand's name: "run", "graph", "compare", or "gemm", "ar", ...
 * after "bench"); options follow. --help / -h print the usage on stdout and return 0. */
int pz_cmd_run(int argc, char **argv);       /* tools/cmd_run.c: greedy decode, CPU or CUDA */
int pz_cmd_graph(int argc, char **argv);
int pz_cmd_plan(int argc, char **argv);      /* tools/cmd_plan.c: the per-batch prezero plan */     /* tools/cmd_graph.c: print the decode graph (text / DOT) */
int pz_cmd_compare(int argc, char **argv);   /* tools/cmd_compare.c: prezero OFF vs ON on the GPU */
int pz_cmd_soak(int argc, char **argv);      /* tools/cmd_soak.c: long replay soak on the GPU (soak.h) */
/* tools/bench_<name>.c: GPU benchmarks writing JSON + markdown (1 without CUDA, see bench_common.h) */
int pz_cmd_bench_gemm(int argc, char **argv);
/* prezero tune: tunes the split-K GEMM of the consumer shapes on this GPU and saves the table. */
int pz_cmd_tune(int argc, char **argv);
int pz_cmd_bench_ar(int argc, char **argv);
int pz_cmd_bench_moe(int argc, char **argv);
int pz_cmd_bench_attn(int argc, char **argv);
int pz_cmd_bench_step(int argc, char **argv);
#endif
