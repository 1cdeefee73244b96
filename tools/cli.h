/* prezero CLI subcommands. Each returns the process exit code (0 ok, 1 error, 2 usage);
 * errors are printed as one line "prezero <cmd>: <what is wrong>; <how to fix>". */
#ifndef PZ_TOOLS_CLI_H
#define PZ_TOOLS_CLI_H
int pz_cmd_run(int argc, char **argv);
int pz_cmd_graph(int argc, char **argv);
int pz_cmd_compare(int argc, char **argv);
int pz_cmd_bench_gemm(int argc, char **argv);
int pz_cmd_bench_ar(int argc, char **argv);
int pz_cmd_bench_moe(int argc, char **argv);
int pz_cmd_bench_attn(int argc, char **argv);
int pz_cmd_bench_step(int argc, char **argv);
#endif
