/* prezero soak's command line (path from $PZ_CLI): every bad argument and every model refusal
 * gives exactly one stderr line "prezero soak: <what>; <fix>" and the exit code of
 * tools/cli_args.h (2 for the command line, 1 for the rest), in every build and before any GPU
 * is looked for; --help prints the usage; a valid command line in a build without CUDA, or with
 * no GPU visible, is refused in one line (exit 1). The soak itself runs on the GPU machine
 * (tools/device-check.sh section soak). */
#include <string.h>
#include "pz_test.h"
#include "pz_cli_test.h"
#include "prezero.h"

static const char *cli;
static char dir[] = "/tmp/pz_test_soak_cli_XXXXXX";
static char out_txt[1 << 16], err_txt[1 << 16];

static int run(const char *args) {
  char full[1024];
  snprintf(full, sizeof full, "soak %s", args);
  return pz_cli_run(cli, dir, full, out_txt, sizeof out_txt, err_txt, sizeof err_txt);
}

/* Expects exit `rc` and one stderr line "prezero soak: ...; ..." containing `needle`, nothing on stdout. */
static void refused(const char *args, int rc, const char *needle) {
  int got = run(args);
  size_t n = strlen(err_txt);
  int lines = 0;
  for (size_t i = 0; i < n; i++) lines += err_txt[i] == '\n';
  int ok = got == rc && lines == 1 && err_txt[n - 1] == '\n' && !strncmp(err_txt, "prezero soak: ", 14) &&
           strstr(err_txt, "; ") && strstr(err_txt, needle) && out_txt[0] == 0;
  if (!ok) {
    fprintf(stderr, "FAIL: prezero soak %s -> exit %d (want %d), stderr [%s], stdout [%.80s] (want one line with '%s')\n",
            args, got, rc, err_txt, out_txt, needle);
    pz_test_failures++;
  }
}

int main(void) {
  cli = getenv("PZ_CLI");
  if (!cli || !mkdtemp(dir)) {
    fprintf(stderr, "PZ_CLI unset or no temporary directory\n");
    return 1;
  }
  CHECK(run("--help") == 0 && !strncmp(out_txt, "usage: prezero soak", 19) && err_txt[0] == 0 &&
        strstr(out_txt, "--seconds") && strstr(out_txt, "--replays") && strstr(out_txt, "PREZERO_GEMM_SPLITS=2"));
  CHECK(run("-h") == 0 && !strncmp(out_txt, "usage: prezero soak", 19));
  /* Command line: exit 2. */
  refused("--seconds x", 2, "bad value 'x' for --seconds; use --seconds 1..604800");
  refused("--seconds 0", 2, "bad value '0' for --seconds");
  refused("--seconds=abc", 2, "bad value 'abc' for --seconds"); /* --flag=value reads as --flag value */
  refused("--seconds", 2, "--seconds needs a value");
  refused("--replays 0", 2, "bad value '0' for --replays");
  refused("--replays 1.5", 2, "bad value '1.5' for --replays");
  refused("--frobnicate 3", 2, "unknown option '--frobnicate'");
  refused("--tp 0", 2, "use --tp 1..8");
  refused("--tp 9", 2, "use --tp 1..8");
  refused("--layers 0", 2, "use --layers 1..1000");
  refused("--batch 8,8", 2, "distinct batch sizes 1..256");
  refused("--batch 0,4", 2, "distinct batch sizes 1..256");
  refused("--batch 257", 2, "distinct batch sizes 1..256");
  refused("--batch 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", 2, "at most 16");
  refused("--check-every 0", 2, "use --check-every 1..1000000");
  refused("--step-timeout 0", 2, "use --step-timeout 0.1..3600");
  refused("--mem-slack -1", 2, "use --mem-slack 0..1048576");
  refused("--host-slack x", 2, "use --host-slack 0..1048576");
  refused("--seed 0x", 2, "bad value '0x' for --seed");
  /* Against the model (no GPU needed): kimi_k2 has 61 layers, tiny 8 heads and 4096 positions. */
  refused("--layers 62", 2, "--layers 62 is out of range; use --layers 1..61 (num_hidden_layers of kimi_k2)");
  refused("--config tiny --context 4089", 2, "--context 4089 is out of range; use --context 1..4088");
  refused("--config tiny --tp 3", 2, "num_attention_heads");
  refused("--config kimi_k3", 1, "unknown model preset");
  /* A valid command line: refused for the missing backend or GPU, never run here. */
#ifndef PZ_HAVE_CUDA
  refused("--config tiny --seconds 1", 1, "this build has no CUDA backend");
#else
  if (pz_gpu_count() == 0) refused("--config tiny --seconds 1", 1, "--tp 1 needs 1 GPU, 0 visible");
  if (pz_gpu_count() < 2) refused("--config tiny --tp 2 --seconds 1", 1, "GPU");
#endif
  char rm[128];
  snprintf(rm, sizeof rm, "rm -rf %s", dir);
  if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", dir);
  TEST_DONE();
}
