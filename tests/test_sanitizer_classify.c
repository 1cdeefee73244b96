/* tools/sanitizer-classify.sh, which the compute-sanitizer sweep of tools/device-check.sh runs on
 * every log: on hand-written logs in compute-sanitizer's report layout it counts each report once,
 * calls a report known-vendor only when its kernel lines match an entry of that tool in the list
 * (never through a host frame, never under another tool), fails on any other report and on a
 * summary with errors it could not read, refuses a list entry without its note, and reads the
 * committed tools/sanitizer-known.txt. Needs bash and awk (no GPU). */
#include <string.h>
#include "pz_test.h"
#include "pz_cli_test.h"

static char dir[] = "/tmp/pz_test_sanclass_XXXXXX";
static char script[600], out_txt[8192], err_txt[8192];

static void put(const char *name, const char *text) {
  char p[300];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  if (!f) { perror(p); exit(1); }
  fputs(text, f);
  fclose(f);
}

/* Runs the classifier on dir/log with dir/known (known NULL: the committed list). */
static int classify(const char *tool, const char *log, const char *known) {
  char args[1400];
  if (known) snprintf(args, sizeof args, "%s %s %s/%s %s/%s", script, tool, dir, log, dir, known);
  else snprintf(args, sizeof args, "%s %s %s/%s", script, tool, dir, log);
  return pz_cli_run("bash", dir, args, out_txt, sizeof out_txt, err_txt, sizeof err_txt);
}

/* Two reports in a cuBLAS kernel (nvjet_*), one in ours whose host backtrace passes through
 * cuBLASLt (a frame naming nvjet), the banner, application output and the summary. */
static const char *race_log =
    "========= COMPUTE-SANITIZER\n"
    "gemm cases: 12\n"
    "========= Error: Race reported between Write access at nvjet_hsh_256x128_64x4_2x1_v_bz_coopB_NTN+0x1a30\n"
    "=========     and Read access at nvjet_hsh_256x128_64x4_2x1_v_bz_coopB_NTN+0x1b40 [1024 hazards]\n"
    "=========\n"
    "========= Warning: Race reported between Read access at nvjet_tst_128x64_64x6_1x1_v_bz_NNT+0x230\n"
    "=========     and Write access at nvjet_tst_128x64_64x6_1x1_v_bz_NNT+0x330 [8 hazards]\n"
    "=========\n"
    "========= Error: Race reported between Write access at void pz_splitk_gemm<128>(float *)+0x70 in gemm.cu:88\n"
    "=========     and Read access at void pz_splitk_gemm<128>(float *)+0x90 in gemm.cu:91 [4 hazards]\n"
    "=========     Saved host backtrace up to driver entry point at kernel launch time\n"
    "=========         Host Frame: nvjet_dispatch [0x1234] in libcublasLt.so.13\n"
    "=========\n"
    "all checks passed\n"
    "========= RACECHECK SUMMARY: 3 hazards displayed (2 errors, 1 warning)\n";

static const char *known =
    "# test list\n"
    "\n"
    "racecheck  nvjet_   # cuBLAS Hopper GEMM kernels; seen in test_gemm\n"
    "all        cublasLt::splitKreduce  # cuBLASLt reduction; seen nowhere, a test entry\n";

int main(void) {
  PZ_TEST_PATH(script, "../tools/sanitizer-classify.sh");
  if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
  put("known", known);
  put("race", race_log);
  /* Our kernel's report is unknown even though a host frame names nvjet: exit 1. */
  CHECK(classify("racecheck", "race", "known") == 1);
  CHECK(!strcmp(out_txt, "reports=3 known_vendor=2 unknown=1 first_unknown: Error: Race reported between Write access at "
                         "void pz_splitk_gemm<128>(float *)+0x70 in gemm.cu:88\n"));
  /* Without it, both vendor reports are known: exit 0. */
  char only_vendor[4096];
  snprintf(only_vendor, sizeof only_vendor, "%.*s", (int)(strstr(race_log, "========= Error: Race reported between Write access at void") - race_log), race_log);
  strcat(only_vendor, "========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)\n");
  put("vendor", only_vendor);
  CHECK(classify("racecheck", "vendor", "known") == 0 && !strcmp(out_txt, "reports=2 known_vendor=2 unknown=0\n"));
  /* The entries are per tool: the same reports under memcheck are unknown. */
  CHECK(classify("memcheck", "vendor", "known") == 1 && !strncmp(out_txt, "reports=2 known_vendor=0 unknown=2 first_unknown: ", 50));
  /* An "all" entry applies to every tool; the pattern is a regular expression over the lines. */
  put("init", "========= COMPUTE-SANITIZER\n"
              "========= Uninitialized __global__ memory read of size 4 bytes\n"
              "=========     at void cublasLt::splitKreduce_kernel<32>(float *)+0x100\n"
              "=========     by thread (3,0,0) in block (0,0,0)\n"
              "=========\n"
              "========= Uninitialized __global__ memory read of size 4 bytes\n"
              "=========     at pz_mla_attn(float *)+0x40 in mla.cu:33\n"
              "=========\n"
              "========= Target application returned an error\n"
              "========= ERROR SUMMARY: 2 errors\n");
  CHECK(classify("initcheck", "init", "known") == 1 &&
        !strcmp(out_txt, "reports=2 known_vendor=1 unknown=1 first_unknown: Uninitialized __global__ memory read of size 4 bytes\n"));
  /* A clean log: nothing to report, the banner and the summary are not reports. */
  put("clean", "========= COMPUTE-SANITIZER\nall checks passed\n========= ERROR SUMMARY: 0 errors\n");
  CHECK(classify("synccheck", "clean", "known") == 0 && !strcmp(out_txt, "reports=0 known_vendor=0 unknown=0\n"));
  /* Errors in the summary but no report in a layout the script reads: one unknown report. */
  put("odd", "========= COMPUTE-SANITIZER\n  some new layout: barrier error in pz_donor\n========= ERROR SUMMARY: 3 errors\n");
  CHECK(classify("synccheck", "odd", "known") == 1 && strstr(out_txt, "unknown=1") && strstr(out_txt, "3 error(s)"));
  /* A top-level line the script does not know is a report (unknown), not noise. */
  put("new", "========= COMPUTE-SANITIZER\n========= Internal Sanitizer Error: something\n=========\n========= ERROR SUMMARY: 0 errors\n");
  CHECK(classify("memcheck", "new", "known") == 1 && strstr(out_txt, "first_unknown: Internal Sanitizer Error"));
  /* A list entry without its note, or with an unknown tool: exit 2, one line naming the line. */
  put("nonote", "# ok\nracecheck nvjet_\n");
  CHECK(classify("racecheck", "vendor", "nonote") == 2 && strstr(err_txt, "nonote line 2 is not") && out_txt[0] == 0);
  put("badtool", "memchek nvjet_  # typo\n");
  CHECK(classify("racecheck", "vendor", "badtool") == 2 && strstr(err_txt, "badtool line 1 is not"));
  CHECK(classify("asan", "vendor", "known") == 2 && strstr(err_txt, "TOOL 'asan' is not"));
  CHECK(classify("racecheck", "missing", "known") == 2 && strstr(err_txt, "cannot read the log"));
  /* The committed list parses and knows cuBLAS's nvjet kernels under racecheck (issue 19). */
  CHECK(classify("racecheck", "vendor", NULL) == 0 && !strcmp(out_txt, "reports=2 known_vendor=2 unknown=0\n") && err_txt[0] == 0);
  CHECK(classify("initcheck", "clean", NULL) == 0);
  char rm[128];
  snprintf(rm, sizeof rm, "rm -rf %s", dir);
  if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", dir);
  TEST_DONE();
}
