/* `prezero compare` without a GPU (CLI path from $PZ_CLI): --help, one-line argument errors, the
 * one-line refusal without CUDA / without a GPU, and the report of a hand-written compare.json
 * (--render): Δ%, OFF spread, per-component Δ, n/f, GEMM subtotal, verdicts, plot data. */
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "pz_test.h"
#include "pz_cli_test.h"
#include "prezero.h"
/* White-box: the CLI's argument parsers (static functions), its report and its JSON writer and reader. */
#include "../tools/cmd_compare.c"
#include "../tools/compare_report.c"
#include "../tools/compare_plots.c"
#include "../tools/compare_json.c"
#include "../tools/compare_out.c"
#include "../tools/bench_common.c" /* pz_bench_md_rule */
#include "../tools/cli_ranks.c" /* cmd_compare.c's rank launcher */
#ifdef PZ_HAVE_CUDA
#include "backend/cuda/runtime.h"
#endif

static const char *cli;
static char dir[] = "/tmp/pz_test_compare_XXXXXX";
static char out_txt[1 << 20], err_txt[1 << 16], file_txt[1 << 20];

/* Runs the CLI with `args` (shell words); see pz_cli_run. */
static int run(const char *args) {
  char a[3900];
  snprintf(a, sizeof a, "compare %s", args);
  return pz_cli_run(cli, dir, a, out_txt, sizeof out_txt, err_txt, sizeof err_txt);
}

static int lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

/* A failing invocation: non-zero exit, exactly one stderr line "prezero compare: ...; ..."
 * naming `needle`, nothing on stdout. */
static void bad(const char *args, const char *needle) {
  int rc = run(args);
  int ok = rc != 0 && lines(err_txt) == 1 && !strncmp(err_txt, "prezero compare: ", 17) && strstr(err_txt, needle) &&
           strstr(err_txt, "; ") && out_txt[0] == 0;
  if (!ok) fprintf(stderr, "FAIL: compare %s -> exit %d, stderr [%s], stdout [%.80s] (want one line with '%s')\n", args,
                   rc, err_txt, out_txt, needle);
  CHECK(ok);
}

static void write_file(const char *name, const char *text) {
  char p[300];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  if (!f) { perror(p); exit(1); }
  fputs(text, f);
  fclose(f);
}

/* Two concurrencies. Hand-computed expectations are next to each value in main(). */
/* compare.md of r as a malloc'ed string (*len its bytes), as pz_cmpout_write_markdown writes it. */
static char *markdown_of(const pz_cmp_result *r, size_t *len) {
  char *m = NULL;
  FILE *f = open_memstream(&m, len);
  if (!f) return NULL;
  pz_cmpout_write_markdown(f, r);
  fclose(f);
  return m;
}

static const char *json =
    "{\"model\":\"kimi_k2\",\"device\":\"Test GPU\",\"tp\":2,\"layers\":3,\"layers_total\":61,\"layers_auto\":true,"
    "\"isl\":8192,\"osl\":100,\"rounds\":2,\"seed\":1234,\"determinism\":\"PREZERO_GEMM_SPLITS=unset\",\"notes\":\"hand\","
    "\"points\":["
    "{\"conc\":4,\"batch\":4,\"tput_on\":1050,\"tput_off\":1000,\"tpot_on_ms\":9.5,\"tpot_off_ms\":10.0,"
    "\"e2e_on_s\":0.95,\"e2e_off_s\":1.0,\"tpot_on_rounds_ms\":[9.4,9.6],\"tpot_off_rounds_ms\":[9.9,10.1],"
    "\"profiled\":true,\"components_us_per_layer\":{"
    "\"qkv_a\":{\"on\":12.5,\"off\":14.0,\"fired\":\"yes\"},\"q_b\":{\"on\":5.0,\"off\":6.25,\"fired\":\"yes\"},"
    "\"gate\":{\"on\":7.0,\"off\":8.0,\"fired\":\"yes\",\"kernels_changed\":true},"
    "\"o_proj\":{\"on\":10.1,\"off\":10.0,\"fired\":\"n/f\"},"
    "\"gemm_subtotal\":{\"on\":34.6,\"off\":38.25},\"donor\":{\"on\":16.3,\"off\":16.0}},"
    "\"tokens_identical\":true,\"first_token_mismatch\":-1,\"logits_identical\":true,\"logits_max_abs_diff\":0,"
    "\"logits_off_spread\":0},"
    "{\"conc\":8,\"batch\":8,\"tput_on\":1900,\"tput_off\":2000,\"tpot_on_ms\":4.2,\"tpot_off_ms\":4.0,"
    "\"e2e_on_s\":0.42,\"e2e_off_s\":0.4,\"tpot_on_rounds_ms\":[4.2,4.2],\"tpot_off_rounds_ms\":[3.98,4.02],"
    "\"profiled\":true,\"components_us_per_layer\":{"
    "\"qkv_a\":{\"on\":13.0,\"off\":14.0,\"fired\":\"yes\"},\"q_b\":{\"on\":6.0,\"off\":6.0,\"fired\":\"n/f\"},"
    "\"gate\":{\"on\":7.5,\"off\":8.0,\"fired\":\"yes\"},\"o_proj\":{\"on\":10.0,\"off\":10.0,\"fired\":\"n/f\"},"
    "\"gemm_subtotal\":{\"on\":36.5,\"off\":38.0},\"donor\":{\"on\":16.0,\"off\":16.0}},"
    "\"tokens_identical\":false,\"first_token_mismatch\":19,\"logits_identical\":false,\"logits_max_abs_diff\":0.5,"
    "\"logits_off_spread\":0.25}]}";

int main(void) {
  cli = getenv("PZ_CLI");
  if (!cli) {
    fprintf(stderr, "PZ_CLI is not set (ctest sets it); skipping\n");
    return 77;
  }
  if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }

  /* --help */
  CHECK(run("--help") == 0);
  CHECK(strstr(out_txt, "usage: prezero compare") != NULL);
  CHECK(strstr(out_txt, "--conc") && strstr(out_txt, "--render") && strstr(out_txt, "E2E per request"));

  /* argument errors: one line each */
  bad("--tp 0", "--tp 0 is out of range");
  bad("--tp x", "--tp needs an integer");
  bad("--tp 3", "does not divide num_attention_heads");
  bad("--conc 8,4", "ascending");
  bad("--conc 4,,8", "comma-separated integers");
  bad("--conc 4,8,", "ends with a comma");
  bad("--conc 300", "within 1..256");
  bad("--conc ''", "--conc is empty");
  bad("--osl", "--osl needs a value");
  bad("--osl 0", "--osl 0 is out of range");
  bad("--rounds 17", "--rounds 17 is out of range");
  bad("--frob", "unknown option '--frob'");
  bad("--config nope", "nope");
  bad("--layers 99", "exceeds num_hidden_layers (61)");
  bad("--isl 1000000", "exceeds max_position_embeddings");
  bad("--seed -x", "--seed needs");
  bad("--baseline frob", "--baseline 'frob' is not one of tuned, inkernel, memset, serial, fullk, cublas");
  bad("--baseline memset,,cublas", "--baseline '' is not one of");
  bad("--baseline ''", "--baseline is empty");
  bad("--baseline", "--baseline needs a value");
  bad("--baseline memset --no-profile", "--baseline needs the CUPTI profile");
  {
    unsigned m = 0;
    CHECK(parse_baselines("inkernel,memset,serial,cublas", &m) == 0 &&
          m == ((1u << PZ_CMP_BASE_INKERNEL) | (1u << PZ_CMP_BASE_MEMSET) | (1u << PZ_CMP_BASE_SERIAL) | (1u << PZ_CMP_BASE_CUBLAS)));
    CHECK(parse_baselines("tuned,fullk,", &m) == 0 && m == ((1u << PZ_CMP_BASE_TUNED) | (1u << PZ_CMP_BASE_FULLK)));
  }
  /* --isl L or A:B: unequal prompts, request i's length a seeded uniform draw from [A, B] */
  bad("--isl 5:2", "upper bound below the lower one");
  bad("--isl 0:8", "--isl 0 is out of range");
  bad("--isl :8", "--isl needs L or A:B");
  bad("--isl 8:x", "--isl needs an integer");
  bad("--isl 1024:200000", "--isl 200000 + --osl 1024 exceeds max_position_embeddings");
  {
    int a = 0, b = 0, lo = 1 << 30, hi = 0, stable = 1, differ = 0;
    CHECK(parse_isl("1024:16384", &a, &b) == 0 && a == 1024 && b == 16384);
    CHECK(parse_isl("77", &a, &b) == 0 && a == 77 && b == 0);
    double mean = 0;
    for (int i = 0; i < 4096; i++) {
      const int v = pz_cmp_isl_of(1234, 1024, 16384, i);
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
      mean += v / 4096.0;
      stable &= v == pz_cmp_isl_of(1234, 1024, 16384, i);
      differ += v != pz_cmp_isl_of(99, 1024, 16384, i);
    }
    CHECK(lo >= 1024 && hi <= 16384 && stable && differ > 4000);
    CHECK(lo < 1024 + 100 && hi > 16384 - 100); /* spread over the range: a miss has probability ~2^-37 */
    CHECK(fabs(mean - 8704.0) < 300.0);         /* uniform mean; the mean of 4096 draws has sd 69 */
    CHECK(pz_cmp_isl_of(1234, 8192, 0, 5) == 8192 && pz_cmp_isl_of(1234, 8192, 8192, 5) == 8192);
    CHECK(pz_cmp_isl_cap(1024, 16384) == 16384 && pz_cmp_isl_cap(8192, 0) == 8192);
  }
  /* --seed reads like `prezero run --seed`: decimal, or hex with 0x; never octal. */
  bad("--seed -1", "--seed needs");
  bad("--seed 0x", "--seed needs");
  bad("--seed 0x1g", "--seed needs");
  bad("--seed \\ 7", "--seed needs"); /* a leading space */
  bad("--seed 1e3", "--seed needs");
  bad("--seed 18446744073709551616", "--seed needs"); /* 2^64 */
  bad("--seed 08 --layers 99", "exceeds num_hidden_layers"); /* 08 is accepted (base 0 refused it) */
  {
    unsigned long long s = 77;
    CHECK(pz_cli_parse_seed("010", &s) == 0 && s == 10);
    CHECK(pz_cli_parse_seed("08", &s) == 0 && s == 8);
    CHECK(pz_cli_parse_seed("0x10", &s) == 0 && s == 16);
    CHECK(pz_cli_parse_seed("0X1f", &s) == 0 && s == 31);
    CHECK(pz_cli_parse_seed("0", &s) == 0 && s == 0);
    CHECK(pz_cli_parse_seed("18446744073709551615", &s) == 0 && s == 18446744073709551615ull);
    s = 77;
    CHECK(pz_cli_parse_seed("", &s) == -1 && pz_cli_parse_seed("+5", &s) == -1 && pz_cli_parse_seed("0x-1", &s) == -1 &&
          pz_cli_parse_seed("12 ", &s) == -1 && s == 77);
  }

  /* Valid arguments but no GPU path: one line, non-zero (skipped on a machine with a GPU, where
   * this would start a real run). */
  int gpus = 0;
#ifdef PZ_HAVE_CUDA
  gpus = pz_cuda_device_count();
#endif
  if (gpus == 0) {
    char a[400];
    snprintf(a, sizeof a, "--config tiny --isl 16 --osl 2 --conc 1,2 --out %s/nogpu", dir);
    int rc = run(a);
    CHECK(rc != 0);
    CHECK(lines(err_txt) == 1);
    CHECK(!strncmp(err_txt, "prezero compare: ", 17));
#ifdef PZ_HAVE_CUDA
    CHECK(strstr(err_txt, "--tp 1 needs 1 GPU, 0 visible; run it on a machine with a CUDA GPU") != NULL);
    snprintf(a, sizeof a, "--config tiny --tp 2 --isl 16 --osl 2 --conc 1 --out %s/nogpu", dir);
    CHECK(run(a) == 1 && lines(err_txt) == 1 &&
          strstr(err_txt, "prezero compare: --tp 2 needs 2 GPUs, 0 visible; run it on a machine with at least 2 GPUs\n"));
#else
    CHECK(strstr(err_txt, "no CUDA backend") != NULL);
#endif
  }

  /* The refusal for too few GPUs, shared with bench: "<what>; <how to fix>". */
  {
    char m[300];
    pz_cli_gpu_refusal(m, sizeof m, "--tp 2", 2, 1, 1);
    CHECK(!strcmp(m, "--tp 2 needs 2 GPUs, 1 visible; run it on a machine with at least 2 GPUs or use --tp 1"));
    pz_cli_gpu_refusal(m, sizeof m, "--tp 4", 4, 0, 1); /* --tp 1 would not help either */
    CHECK(!strcmp(m, "--tp 4 needs 4 GPUs, 0 visible; run it on a machine with at least 4 GPUs"));
    pz_cli_gpu_refusal(m, sizeof m, "TP 2", 2, 1, 0);
    CHECK(!strcmp(m, "TP 2 needs 2 GPUs, 1 visible; run it on a machine with at least 2 GPUs"));
    pz_cli_gpu_refusal(m, sizeof m, "this benchmark", 1, 0, 1);
    CHECK(!strcmp(m, "this benchmark needs 1 GPU, 0 visible; run it on a machine with a CUDA GPU"));
  }

  /* --render of a hand-written run */
  write_file("in.json", json);
  char a[600];
  snprintf(a, sizeof a, "--render %s/in.json --out %s/rep", dir, dir);
  CHECK(run(a) == 0);
  char p[400];
  snprintf(p, sizeof p, "%s/rep/compare.md", dir);
  slurp(p, file_txt, sizeof file_txt);
  CHECK(strcmp(file_txt, out_txt) == 0); /* stdout = the markdown file */
  CHECK(strstr(file_txt, "kimi_k2, TP 2, 3 of 61 layers (chosen from free memory), ISL 8192, OSL 100") != NULL);
  /* conc 4: tput +5.00%, TPOT -5.00%, E2E -5.00%, OFF spread (10.1-9.9)/10 = 2.00% */
  CHECK(strstr(file_txt, "| 4 | 1050.0 | 1000.0 | +5.00% | 9.500 | 10.000 | -5.00% | 0.950 | 1.000 | -5.00% | 2.00 |"));
  /* conc 8: tput -5.00%, TPOT +5.00% (slower beyond the 1.00% spread: (4.02-3.98)/4) */
  CHECK(strstr(file_txt, "| 8 | 1900.0 | 2000.0 | -5.00% | 4.200 | 4.000 | +5.00% | 0.420 | 0.400 | +5.00% | 1.00 |"));
  /* Δ rows: qkv_a -1.50 / -1.00; q_b -1.25 / n/f; gate -1.00 / -0.50; o_proj n/f (+0.10) / n/f;
   * subtotal = sum of the four Δ: -3.65 / -1.50; fill cost +0.30 / +0.00 */
  CHECK(strstr(file_txt, "| qkv_a | -1.50 | -1.00 |"));
  CHECK(strstr(file_txt, "| q_b | -1.25 | n/f (+0.00) |"));
  CHECK(strstr(file_txt, "| gate | -1.00 | -0.50 |"));
  CHECK(strstr(file_txt, "| o_proj | n/f (+0.10) | n/f (+0.00) |"));
  CHECK(strstr(file_txt, "| GEMM subtotal | -3.65 | -1.50 |"));
  CHECK(strstr(file_txt, "| donor fill cost (ON - OFF) | +0.30 | +0.00 |"));
  CHECK(strstr(file_txt, "| qkv_a | 12.50 / 14.00 | 13.00 / 14.00 |"));
  /* bit-identity: step 19/8 = 2, row 19%8 = 3 */
  CHECK(strstr(file_txt, "| 4 | identical | bit-identical | 0 | 0 |"));
  CHECK(strstr(file_txt, "| 8 | differ (first at step 2, row 3) | differ | 0.5 | 0.25 |"));
  /* conc 8: max diff 0.5 > OFF spread 0.25 */
  CHECK(strstr(file_txt, "Verdict: tokens DIFFER; logits not bit-identical; beyond OFF's own run-to-run spread at conc 8 ("));
  CHECK(strstr(file_txt, "within it at conc") == NULL); /* conc 4 is bit-identical: in neither list */
  CHECK(strstr(file_txt, "where tokens differ, the final logits belong to different sequences"));
  CHECK(strstr(file_txt, "PREZERO_GEMM_SPLITS=unset"));
  /* the fired list is the saved plan's (every component's "fired"), not a kernel-name guess */
  CHECK(strstr(file_txt, "where none fires, ON runs the OFF graph): conc 4: qkv_a q_b gate; conc 8: qkv_a gate;"));
  /* layer total = GEMM subtotal + donor fill: -3.65 + 0.30, -1.50 + 0 */
  CHECK(strstr(file_txt, "| layer total (consumer GEMMs + 2 donors) | -3.35 | -1.50 |"));
  CHECK(strstr(file_txt, "% (noise) |") == NULL); /* both TPOT differences exceed OFF's spread */
  /* targets: slower beyond spread at conc 8 only; saving >= 4 µs at neither (-3.65, -1.50) */
  CHECK(strstr(file_txt, "ON slower than OFF beyond OFF's spread at 1 of 2 concurrencies"));
  CHECK(strstr(file_txt, "ON <= OFF + 0.1 µs at 2 of 2 profiled concurrencies; ON saves >= 3 µs per layer at 1 of 2 "
                         "profiled concurrencies <= 32."));
  /* plots always: a PNG whenever gnuplot, or python3 with matplotlib, is there (CI installs gnuplot) */
  {
    snprintf(p, sizeof p, "%s/rep/throughput.png", dir);
    int have_gp = system("command -v gnuplot >/dev/null 2>&1") == 0;
    int have_mpl = system("python3 -c 'import matplotlib' >/dev/null 2>&1") == 0;
    if (have_gp || have_mpl) CHECK(access(p, F_OK) == 0);
    else printf("neither gnuplot nor matplotlib here: PNG not checked\n");
  }
  /* plot data: n/f entries are 0 */
  snprintf(p, sizeof p, "%s/rep/components.dat", dir);
  slurp(p, file_txt, sizeof file_txt);
  CHECK(strstr(file_txt, "\n4 -1.5000 -1.2500 -1.0000 0.0000 0.0000 -3.6500 0.3000\n")); /* sh_gu unmeasured: 0 */
  CHECK(strstr(file_txt, "\n8 -1.0000 0.0000 -0.5000 0.0000 0.0000 -1.5000 0.0000\n"));
  snprintf(p, sizeof p, "%s/rep/throughput.dat", dir);
  slurp(p, file_txt, sizeof file_txt);
  CHECK(strstr(file_txt, "\n4 1050.000 1000.000 9.5000 10.0000\n"));
  snprintf(p, sizeof p, "%s/rep/plots.gp", dir);
  slurp(p, file_txt, sizeof file_txt);
  CHECK(strstr(file_txt, "throughput.png") && strstr(file_txt, "components.png"));
  snprintf(p, sizeof p, "%s/rep/compare.json", dir);
  CHECK(access(p, F_OK) != 0); /* a render does not write JSON */
  CHECK(strstr(err_txt, "/{compare.md,") != NULL); /* no compare.json in the list of written files */

  /* a run with unequal prompts says so in its header; isl_max round-trips through the JSON */
  {
    static char j2[8192];
    const char *at = strstr(json, "\"isl\":8192,");
    CHECK(at != NULL);
    if (at) {
      snprintf(j2, sizeof j2, "%.*s\"isl\":1024,\"isl_max\":16384,%s", (int)(at - json), json, at + strlen("\"isl\":8192,"));
      write_file("in2.json", j2);
      snprintf(a, sizeof a, "--render %s/in2.json --out %s/rep2", dir, dir);
      CHECK(run(a) == 0);
      CHECK(strstr(out_txt, "ISL 1024:16384 (per request, seeded uniform), OSL 100") != NULL);
      CHECK(strstr(out_txt, "Unequal prompts: request i's ISL is drawn uniformly from [1024, 16384]") != NULL);
      static pz_cmp_result r1, r2;
      CHECK(pz_cmpout_from_json(j2, &r1) == NULL && r1.isl == 1024 && r1.isl_max == 16384);
      cJSON *jj = pz_cmpout_to_json(&r1);
      char *text = cJSON_Print(jj);
      CHECK(text && pz_cmpout_from_json(text, &r2) == NULL && memcmp(&r1, &r2, sizeof r1) == 0);
      free(text);
      cJSON_Delete(jj);
    }
  }

  /* JSON round trip: read -> write -> read gives the same result, field for field. */
  {
    static pz_cmp_result r1, r2;
    CHECK(pz_cmpout_from_json(json, &r1) == NULL);
    CHECK(r1.n_points == 2 && r1.points[1].first_token_mismatch == 19 && r1.points[0].fired[PZ_CMP_O_PROJ] == PZ_CMP_NOT_FIRED);
    cJSON *j = pz_cmpout_to_json(&r1);
    char *text = cJSON_Print(j);
    CHECK(text && pz_cmpout_from_json(text, &r2) == NULL);
    CHECK(memcmp(&r1, &r2, sizeof r1) == 0);
    free(text);
    cJSON_Delete(j);
  }

  /* A run with baselines and a whole-model projection, and --render byte for byte: the report
   * of a result equals the report of its compare.json read back (values round-trip exactly). */
  {
    static pz_cmp_result r1, r2;
    CHECK(pz_cmpout_from_json(json, &r1) == NULL);
    r1.baselines = (1u << PZ_CMP_BASE_MEMSET) | (1u << PZ_CMP_BASE_CUBLAS);
    r1.dense_total = 1;
    r1.moe_total = 60;
    pz_cmp_point *q = &r1.points[0];
    q->n_dense_run = 1;
    q->n_moe_run = 2;
    q->dense_layer_us[0] = 100.0 / 3.0; /* not a short decimal: the JSON must carry it exactly */
    q->dense_layer_us[1] = 33.0;
    q->moe_layer_us[0] = 50.0;
    q->moe_layer_us[1] = 48.125;
    r1.points[1].dense_layer_us[0] = r1.points[1].dense_layer_us[1] = -1;
    r1.points[1].moe_layer_us[0] = r1.points[1].moe_layer_us[1] = -1;
    r1.points[1].n_moe_run = 3;
    for (int c = 0; c < PZ_CMP_N_COMP; c++)
      for (int b = 0; b < PZ_CMP_N_BASE; b++) r1.points[0].base_us[b][c] = r1.points[1].base_us[b][c] = -1;
    const double memset_us[PZ_CMP_N_COMP] = {15.0, 7.0, 9.0, 11.0, -1.0, 42.0, 16.0}; /* no sh_gu (bf16 MoE) */
    const double cublas_us[PZ_CMP_N_COMP] = {13.5, 5.5, 7.5, 10.5, -1.0, 37.0, 16.0};
    for (int c = 0; c < PZ_CMP_N_COMP; c++) {
      q->base_us[PZ_CMP_BASE_TUNED][c] = q->comp_off_us[c];
      q->base_us[PZ_CMP_BASE_MEMSET][c] = memset_us[c];
      q->base_us[PZ_CMP_BASE_CUBLAS][c] = cublas_us[c];
    }
    size_t l1 = 0, l2 = 0;
    char *m1 = markdown_of(&r1, &l1);
    cJSON *j = pz_cmpout_to_json(&r1);
    char *text = cJSON_Print(j);
    CHECK(text && pz_cmpout_from_json(text, &r2) == NULL);
    char *m2 = markdown_of(&r2, &l2);
    CHECK(l1 == l2 && memcmp(m1, m2, l1) == 0);
    /* baselines, conc 4: ON 12.5 + 5.0 + 7.0 + 10.1 + donors 16.3 = 50.90; tuned (OFF) 14 + 6.25 +
     * 8 + 10 + 16 = 54.25; memset 15 + 7 + 9 + 11 + 16 = 58.00; cublas 13.5 + 5.5 + 7.5 + 10.5 + 16
     * = 53.00 -> best cublas, ON - best = -2.10 */
    CHECK(m1 && strstr(m1, "| component | prezero ON | tuned | memset | cublas |"));
    CHECK(m1 && strstr(m1, "| qkv_a | 12.50 | 14.00 | 15.00 | 13.50 |"));
    CHECK(m1 && strstr(m1, "| total | 50.90 | 54.25 | 58.00 | 53.00 |"));
    CHECK(m1 && strstr(m1, "prezero ON - best baseline (cublas): -2.10 µs per layer"));
    /* projection, conc 4: OFF 10.0 + 0 dense x 33.3 + 58 MoE x 50.0 µs = 12.9 ms; ON: OFF's 50.0 µs per MoE
     * layer plus the layer's ON - OFF of the 4 GEMMs + 2 donors, (-1.5 - 1.25 - 1.0 + 0.1) + 0.3 = -3.35 µs
     * (ON's own 48.125 µs per layer is not used): 9.5 + 58 x 46.65 µs = 12.2057 ms -> -5.38%; conc 8 has no
     * MoE time: not projected */
    CHECK(m1 && strstr(m1, "Projection to all 61 layers (1 dense, 60 MoE) - a projection, not a measurement"));
    CHECK(m1 && strstr(m1, "| 4 | 1 + 2 | 33.3 / 33.0 | 50.0 / 48.1 | 12.900 | 12.206 | -5.38% |"));
    CHECK(m1 && strstr(m1, "| 8 | 0 + 3 | - | - | - | - | - |"));
    { /* 3 dense layers, 2 not run: a dense layer adds OFF's 33.33 µs and the same Δ, -3.35 µs:
       * OFF 10 + 2 x 33.333 + 58 x 50 µs = 12.96667 ms; ON 9.5 + 2 x 29.9833 + 58 x 46.65 µs = 12.26567 ms -> -5.41% */
      r1.dense_total = 3;
      size_t l3 = 0;
      char *m3 = markdown_of(&r1, &l3);
      CHECK(m3 && strstr(m3, "| 4 | 1 + 2 | 33.3 / 33.0 | 50.0 / 48.1 | 12.967 | 12.266 | -5.41% |"));
      free(m3);
      r1.dense_total = 1;
    }
    { /* the shared experts' gate | up (sh_gu, a MoE op's) fired at conc 4: ON 8.0, OFF 9.5 µs (-1.5). A MoE layer's
       * Δ is -3.35 - 1.5 = -4.85, a dense layer's stays -3.35. 3 dense layers (2 not run), 60 MoE (58 not run):
       * OFF 10 + 2 x 33.333 + 58 x 50 µs = 12.96667 ms; ON 9.5 + 2 x 29.9833 + 58 x 45.15 µs = 12.17867 ms -> -6.08 %.
       * Saving over the 3 layers run: 1 x 3.35 + 2 x 4.85 = 13.05 µs, 4.35 per layer. Baselines (sh_gu memset 10,
       * cublas 9): ON 50.90 + 8 = 58.90, tuned 54.25 + 9.5 = 63.75, memset 68.00, cublas 62.00 -> -3.10 */
      static pz_cmp_result r4;
      r4 = r1;
      r4.dense_total = 3;
      pz_cmp_point *q4 = &r4.points[0];
      q4->comp_on_us[PZ_CMP_SH_GU] = 8.0;
      q4->comp_off_us[PZ_CMP_SH_GU] = 9.5;
      q4->fired[PZ_CMP_SH_GU] = PZ_CMP_FIRED;
      q4->base_us[PZ_CMP_BASE_TUNED][PZ_CMP_SH_GU] = 9.5;
      q4->base_us[PZ_CMP_BASE_MEMSET][PZ_CMP_SH_GU] = 10.0;
      q4->base_us[PZ_CMP_BASE_CUBLAS][PZ_CMP_SH_GU] = 9.0;
      size_t l4 = 0;
      char *m4 = markdown_of(&r4, &l4);
      CHECK(m4 && strstr(m4, "| 4 | 1 + 2 | 33.3 / 33.0 | 50.0 / 48.1 | 12.967 | 12.179 | -6.08% |"));
      CHECK(m4 && strstr(m4, "| layer total (consumer GEMMs + 2 donors) | -4.85 | -1.50 |"));
      CHECK(m4 && strstr(m4, "| sh_gu | -1.50 | - |"));
      CHECK(m4 && strstr(m4, "| total | 58.90 | 63.75 | 68.00 | 62.00 |"));
      CHECK(m4 && strstr(m4, "prezero ON - best baseline (cublas): -3.10 µs per layer"));
      /* saving per layer 4.35; a MoE layer's own 4.85 of its 50 µs = 9.70 %; 13.05 of 10 ms; (3 x 3.35 + 60 x 4.85)
         = 301.05 µs of 12.96667 ms = 2.32 % */
      CHECK(m4 && strstr(m4, "| 4 | 50.0 / 48.1 | 33.3 / 33.0 | +4.35 | 9.70% | 10.000 | 0.13% | 2.32% |"));
      free(m4);
    }
    free(text);
    cJSON_Delete(j);
    free(m1);
    free(m2);
  }

  /* render errors */
  snprintf(a, sizeof a, "--render %s/missing.json --out %s/rep2", dir, dir);
  CHECK(run(a) != 0 && lines(err_txt) == 1 && strstr(err_txt, "cannot read"));
  write_file("bad.json", "{\"tp\": 1, \"points\": [ {\"conc\": 4, ");
  snprintf(a, sizeof a, "--render %s/bad.json --out %s/rep2", dir, dir);
  CHECK(run(a) != 0 && lines(err_txt) == 1 && strstr(err_txt, "not a JSON object"));
  write_file("other.json", "{\"model\": \"x\"}");
  snprintf(a, sizeof a, "--render %s/other.json --out %s/rep2", dir, dir);
  CHECK(run(a) != 0 && lines(err_txt) == 1 && strstr(err_txt, "not a compare.json"));

  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  TEST_DONE();
}
