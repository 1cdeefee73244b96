/* prezero compare: prezero OFF vs ON end to end on the GPU (throughput, TPOT, E2E, per-layer
 * kernel components from CUPTI, bit-identity), written as JSON, markdown and gnuplot plots.
 * --render JSON re-writes the report of a saved run (works without CUDA). This file reads the
 * command line and runs the comparison; the outputs are written by tools/compare_*.c (compare_out.h). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "compare/compare.h"
#include "cli.h"
#include "cli_args.h"
#include "cli_ranks.h"
#include "compare_out.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "prezero.h"
#ifdef PZ_HAVE_CUDA
#include "backend/cuda/ar_mp.h" /* one rank per process: the rendezvous file */
#endif

static void usage(FILE *f) {
  fprintf(f,
          "usage: prezero compare [options]   (needs the CUDA backend, except --render)\n"
          "  --config NAME|PATH  model preset or config.json (default kimi_k2)\n"
          "  --model DIR         Hugging Face checkpoint directory (config.json + safetensors): config and\n"
          "                      weights of both engines from it instead of --config and the seed\n"
          "  --tp T              GPUs, ranks on devices 0..T-1 (default 1)\n"
          "  --quant Q           routed experts of the seeded weights: bf16, int4 (W4A16 group 32) or fp8 (W8A16\n"
          "                      128x128 blocks); the layers that fit follow their bytes (default: the config's\n"
          "                      quantization_config, int4 for kimi_k25, else bf16; not with --model)\n"
          "  --layers N          first N layers (default: as many as fit in free GPU memory; OFF and ON graphs share the weights)\n"
          "  --isl L             prompt KV tokens per request, seeded random cache (default 8192)\n"
          "  --isl A:B           unequal prompts: request i's length drawn uniformly from [A, B] with the seed (the\n"
          "                      same draw for every concurrency, round and engine; the KV capacity is B + osl)\n"
          "  --osl S             greedy decode steps per request (default 1024)\n"
          "  --conc A,B,...      concurrencies = batch sizes, ascending, 1..256 (default 4,8,16,32,64,128)\n"
          "  --rounds R          OFF/ON pairs per concurrency, run A B A B (default 2)\n"
          "  --seed X            weights, KV cache and first tokens (default 1234)\n"
          "  --profile-iters N   CUDA-graph replays per engine under CUPTI (default 20)\n"
          "  --no-profile        skip the CUPTI kernel breakdown\n"
          "  --deterministic     split-K GEMMs use at most 2 splits (sets PREZERO_GEMM_SPLITS=2 unless set), so\n"
          "                      ON and OFF must be bit-identical (docs/ARCHITECTURE.md section 5); timings are then not the tuned ones\n"
          "  --baseline LIST     also profile the OFF graph with every GEMM forced to each zeroing strategy in\n"
          "                      LIST (tuned, inkernel, memset, serial, fullk, cublas; comma-separated) and\n"
          "                      print their per-layer µs beside prezero ON (needs the CUPTI profile)\n"
          "  --out DIR           write compare.json, compare.md, *.dat, plots.gp and the PNGs (gnuplot, else\n"
          "                      python3 + matplotlib) into DIR, created if missing (default ./prezero_compare)\n"
          "  --render JSON       re-write compare.md and the plot files of a saved compare.json into --out\n"
          "  --procs N           one process per TP rank: forks N ranks (TP N), rank r on GPU r %% (visible GPUs),\n"
          "                      two on one GPU work (then time-sliced: a functional run, not a timing one);\n"
          "                      rank 0 reports and writes --out\n"
          "  --rank R --world W --id-file F  the same, each rank started by your own launcher\n"
          "  --timeout-s S       one process per rank: the longest wait on a peer, 1..3600 s (default 60)\n"
          "  --help              this text\n"
          "Per concurrency: TPOT = decode seconds / osl (host clock around the steps, each step waits for\n"
          "every GPU and the argmax); E2E per request = the osl decode steps (no prefill: the prompt KV is\n"
          "pre-filled); tokens/s per GPU = conc*osl / decode seconds / tp. Kernel components are medians\n"
          "per CUDA-graph node from CUPTI (rank 0), summed per layer. Determinism: see docs/ARCHITECTURE.md section 5;\n"
          "PREZERO_GEMM_SPLITS=2 makes ON and OFF bit-identical (0 + a + b = 0 + b + a).\n");
}

static int fail_line(const char *what, const char *fix) {
  fprintf(stderr, "prezero compare: %s; %s\n", what, fix);
  return 2;
}

/* One integer flag of this subcommand (tools/cli_args.h: one line on error, exit code 2). */
static int parse_int(const char *flag, const char *v, long long lo, long long hi, long long *out) {
  return pz_cli_parse_int("compare", flag, v, lo, hi, out);
}

/* --isl L or --isl A:B (1 <= A <= B <= 2^20): *isl = L or A, *isl_max = 0 or B. */
static int parse_isl(const char *v, int *isl, int *isl_max) {
  const char *colon = strchr(v, ':');
  long long a, b = 0;
  if (!colon) {
    if (parse_int("--isl", v, 1, 1 << 20, &a)) return 1;
  } else {
    char lo[32];
    const size_t n = (size_t)(colon - v);
    if (n == 0 || n >= sizeof lo) {
      char msg[300];
      snprintf(msg, sizeof msg, "--isl needs L or A:B, got '%.200s'", v);
      return fail_line(msg, "e.g. --isl 8192 or --isl 1024:16384") != 0;
    }
    memcpy(lo, v, n);
    lo[n] = 0;
    if (parse_int("--isl", lo, 1, 1 << 20, &a) || parse_int("--isl", colon + 1, 1, 1 << 20, &b)) return 1;
    if (b < a) {
      char msg[300];
      snprintf(msg, sizeof msg, "--isl %lld:%lld has its upper bound below the lower one", a, b);
      return fail_line(msg, "give A <= B, e.g. --isl 1024:16384") != 0;
    }
  }
  *isl = (int)a;
  *isl_max = (int)b;
  return 0;
}

/* "4,8,16": ascending integers in 1..256, at most PZ_CMP_MAX_CONC. */
static int parse_conc(const char *v, int *conc, int *n) {
  *n = 0;
  const char *s = v;
  while (*s) {
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (!pz_cli_starts_number(s) || end == s || errno || (*end && *end != ',')) return fail_line("--conc needs comma-separated integers", "e.g. --conc 4,8,16");
    if (x < 1 || x > 256) return fail_line("--conc values must be within 1..256", "e.g. --conc 4,8,16");
    if (*n == PZ_CMP_MAX_CONC) return fail_line("--conc has too many values", "give at most 16");
    if (*n && x <= conc[*n - 1]) return fail_line("--conc values must be ascending without repeats", "e.g. --conc 4,8,16");
    conc[(*n)++] = (int)x;
    s = *end ? end + 1 : end;
    if (*end && !*s) return fail_line("--conc ends with a comma", "e.g. --conc 4,8,16");
  }
  if (*n == 0) return fail_line("--conc is empty", "e.g. --conc 4,8,16");
  return 0;
}

/* --baseline LIST: names of pz_cmp_base, comma-separated, into a bit set. */
static int parse_baselines(const char *v, unsigned *out) {
  unsigned m = 0;
  const char *s = v;
  while (*s) {
    size_t l = strcspn(s, ",");
    int hit = -1;
    for (int b = 0; b < PZ_CMP_N_BASE; b++)
      if (strlen(pz_cmp_base_name(b)) == l && !strncmp(s, pz_cmp_base_name(b), l)) hit = b;
    if (hit < 0) {
      char msg[400];
      snprintf(msg, sizeof msg, "--baseline '%.*s' is not one of tuned, inkernel, memset, serial, fullk, cublas", (int)(l > 100 ? 100 : l), s);
      return fail_line(msg, "e.g. --baseline inkernel,memset,serial,cublas");
    }
    m |= 1u << hit;
    s += l;
    if (*s == ',') {
      s++;
      if (!*s) break;
    }
  }
  if (!m) return fail_line("--baseline is empty", "e.g. --baseline inkernel,memset,serial,cublas");
  *out = m;
  return 0;
}

#ifdef PZ_HAVE_CUDA
/* One status line on stderr, rewritten in place on a terminal, else one line per update. */
static bool progress_shown;
static void on_progress(void *user, const char *line) {
  (void)user;
  if (isatty(2)) fprintf(stderr, "\r[compare] %-100.100s", line);
  else fprintf(stderr, "[compare] %s\n", line);
  progress_shown = true;
  fflush(stderr);
}
#endif

int pz_cmd_compare(int argc, char **argv) {
  pz_cmp_opts o = PZ_CMP_OPTS_INIT;
  const char *out = "prezero_compare", *render_path = NULL;
  bool config_given = false;
  long long v;
  long long procs = 0, rank = -1, world = 0, timeout_s = 60;
  const char *id_file = NULL;
  bool tp_given = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
    if (!strcmp(a, "--no-profile")) { o.profile = false; continue; }
    if (!strcmp(a, "--deterministic")) { setenv("PREZERO_GEMM_SPLITS", "2", 1); continue; } /* the flag beats the environment */
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    bool takes = !strcmp(a, "--config") || !strcmp(a, "--model") || !strcmp(a, "--tp") || !strcmp(a, "--layers") ||
                 !strcmp(a, "--isl") || !strcmp(a, "--osl") || !strcmp(a, "--conc") || !strcmp(a, "--rounds") || !strcmp(a, "--seed") ||
                 !strcmp(a, "--out") || !strcmp(a, "--render") || !strcmp(a, "--profile-iters") || !strcmp(a, "--baseline") || !strcmp(a, "--quant") ||
                 !strcmp(a, "--procs") || !strcmp(a, "--rank") || !strcmp(a, "--world") || !strcmp(a, "--id-file") || !strcmp(a, "--timeout-s");
    if (!takes) {
      char msg[300];
      snprintf(msg, sizeof msg, "unknown option '%.200s'", a);
      return fail_line(msg, "see 'prezero compare --help'");
    }
    if (!val) {
      char msg[300];
      snprintf(msg, sizeof msg, "%s needs a value", a);
      return fail_line(msg, "see 'prezero compare --help'");
    }
    i++;
    if ((!strcmp(a, "--config") || !strcmp(a, "--model")) &&
        pz_cli_empty_model_flag("compare", a, val, pz_config_preset_names()))
      return PZ_CLI_EXIT_USAGE;
    if (!strcmp(a, "--config")) { o.model = val; config_given = true; }
    else if (!strcmp(a, "--model")) o.model_dir = val;
    else if (!strcmp(a, "--out")) out = val;
    else if (!strcmp(a, "--render")) render_path = val;
    else if (!strcmp(a, "--baseline")) { if (parse_baselines(val, &o.baselines)) return 2; }
    else if (!strcmp(a, "--quant")) {
      o.quant = !strcmp(val, "bf16") ? PZ_QUANT_BF16 : !strcmp(val, "int4") ? PZ_QUANT_INT4 : !strcmp(val, "fp8") ? PZ_QUANT_FP8 : -1;
      if (o.quant < 0) {
        char msg[300];
        snprintf(msg, sizeof msg, "--quant '%.200s' is not a storage of the routed experts", val);
        return fail_line(msg, "use --quant bf16, int4 or fp8");
      }
    }
    else if (!strcmp(a, "--conc")) { if (parse_conc(val, o.conc, &o.n_conc)) return 2; }
    else if (!strcmp(a, "--tp")) { if (parse_int(a, val, 1, 8, &v)) return 2; o.tp = (int)v; tp_given = true; }
    else if (!strcmp(a, "--procs")) { if (parse_int(a, val, 2, 8, &procs)) return 2; }
    else if (!strcmp(a, "--rank")) { if (parse_int(a, val, 0, 7, &rank)) return 2; }
    else if (!strcmp(a, "--world")) { if (parse_int(a, val, 2, 8, &world)) return 2; }
    else if (!strcmp(a, "--timeout-s")) { if (parse_int(a, val, 1, 3600, &timeout_s)) return 2; }
    else if (!strcmp(a, "--id-file")) id_file = val;
    else if (!strcmp(a, "--layers")) { if (parse_int(a, val, 1, 1000, &v)) return 2; o.layers = (int)v; }
    else if (!strcmp(a, "--isl")) { if (parse_isl(val, &o.isl, &o.isl_max)) return 2; }
    else if (!strcmp(a, "--osl")) { if (parse_int(a, val, 1, 1 << 20, &v)) return 2; o.osl = (int)v; }
    else if (!strcmp(a, "--rounds")) { if (parse_int(a, val, 1, PZ_CMP_MAX_ROUNDS, &v)) return 2; o.rounds = (int)v; }
    else if (!strcmp(a, "--profile-iters")) { if (parse_int(a, val, 1, 10000, &v)) return 2; o.profile_iters = (int)v; }
    else if (!strcmp(a, "--seed")) {
      unsigned long long s;
      if (pz_cli_parse_seed(val, &s)) {
        char msg[300];
        snprintf(msg, sizeof msg, "--seed needs a non-negative integer (decimal, or hex with 0x), got '%.200s'", val);
        return fail_line(msg, "e.g. --seed 1234");
      }
      o.seed = s;
    }
  }
  if (render_path) return pz_cmpout_render(render_path, out);
  /* One process per rank: --procs N, or --rank/--world/--id-file together. */
  const bool sep = rank >= 0 || world || id_file;
  if (pz_cli_ranks_form("compare", procs != 0, sep, rank, world, id_file)) return 2;
  const int nranks = (int)(procs ? procs : world);
  if (nranks) {
    if (tp_given && o.tp != nranks) return fail_line("--tp differs from the number of ranks", "leave --tp out or make them equal");
    o.tp = nranks;
  }
  if (o.baselines && !o.profile)
    return fail_line("--baseline needs the CUPTI profile", "drop --no-profile or --baseline");
  if (o.model_dir && config_given)
    return fail_line("--model and --config both give the model", "use one of them");
  if (o.model_dir && o.quant != PZ_QUANT_AUTO)
    return fail_line("--quant sets synthetic weights but --model's checkpoint comes as stored", "drop --quant or --model");
  /* Checks that need no GPU, so they fail the same way in every build. */
  pz_model_config mc;
  if ((o.model_dir ? pz_checkpoint_load_config(o.model_dir, &mc) : pz_config_load(o.model, &mc)) != PZ_OK) {
    char msg[400];
    snprintf(msg, sizeof msg, "%.380s", pz_last_error());
    if (!o.model_dir && o.model && pz_cli_config_dir("compare", o.model, 1)) return PZ_CLI_EXIT_ERROR;
    if (o.model_dir && strstr(msg, "; ")) fprintf(stderr, "prezero compare: %s\n", msg);
    else fail_line(msg, o.model_dir ? "give --model a Hugging Face checkpoint directory"
                                     : "use --config with a preset name or a config.json path");
    return 1;
  }
  if (o.layers > mc.num_hidden_layers) {
    char msg[200];
    snprintf(msg, sizeof msg, "--layers %d exceeds num_hidden_layers (%lld) of %s", o.layers,
             (long long)mc.num_hidden_layers, mc.name);
    fail_line(msg, "use a smaller --layers");
    return 2;
  }
  if (mc.num_attention_heads % o.tp) {
    char msg[200];
    snprintf(msg, sizeof msg, "--tp %d does not divide num_attention_heads (%lld) of %s", o.tp,
             (long long)mc.num_attention_heads, mc.name);
    fail_line(msg, "use a TP that divides it");
    return 2;
  }
  if ((int64_t)pz_cmp_isl_cap(o.isl, o.isl_max) + o.osl > mc.max_position_embeddings) {
    char msg[200];
    snprintf(msg, sizeof msg, "--isl %d + --osl %d exceeds max_position_embeddings (%lld) of %s",
             pz_cmp_isl_cap(o.isl, o.isl_max), o.osl, (long long)mc.max_position_embeddings, mc.name);
    fail_line(msg, "use a smaller --isl or --osl");
    return 2;
  }
#ifndef PZ_HAVE_CUDA
  fprintf(stderr, "prezero compare: this build has no CUDA backend; rebuild with nvcc present (PZ_WITH_CUDA=ON) and run on a GPU\n");
  return 1;
#else
  if (procs) {
    /* Fork the ranks before any CUDA call; each child goes on as its rank. */
    static char id_buf[256];
    int prc = 0;
    int r = pz_cli_fork_ranks("compare", (int)procs, 2.0 * (double)timeout_s + 10.0, id_buf, sizeof id_buf, &prc);
    if (r < 0) return prc;
    rank = r;
    id_file = id_buf;
  }
  pz_ar_comm *comm = NULL;
  pz_ar_unique_id id;
  memset(&id, 0, sizeof id);
  if (nranks) {
    const pz_status js = pz_ar_comm_join_file(nranks, (int)rank, id_file, -1 /* GPU rank % visible */, o.conc[o.n_conc - 1],
                                              (mc.hidden_size + 7) / 8 * 8, (int)(timeout_s * 1000), &comm, &id);
    if (js != PZ_OK) {
      fprintf(stderr, "prezero compare: %s%s\n", pz_last_error(), strstr(pz_last_error(), "; ") ? "" : "; see 'prezero compare --help'");
      return 1; /* the join cleaned up after itself */
    }
    o.ar_comm = comm;
  }
  int gpus = pz_gpu_count();
  if (!comm && gpus < o.tp) {
    char what[32], msg[300];
    snprintf(what, sizeof what, "--tp %d", o.tp);
    pz_cli_gpu_refusal(msg, sizeof msg, what, o.tp, gpus, 1);
    fprintf(stderr, "prezero compare: %s\n", msg);
    return 1;
  }
  o.progress = on_progress;
  o.log = stderr;
  pz_cmp_result *r = malloc(sizeof *r);
  if (!r) return fail_line("out of memory", "free some host memory");
  pz_status st = pz_compare_run(&o, r);
  if (st != PZ_OK && comm) pz_ar_comm_abort(comm); /* the peers may wait in a collective this rank left */
  snprintf(r->command, sizeof r->command, "prezero");
  for (int i = 0; i < argc; i++) {
    strncat(r->command, " ", sizeof r->command - strlen(r->command) - 1);
    strncat(r->command, argv[i], sizeof r->command - strlen(r->command) - 1);
  }
  {
    time_t now = time(NULL);
    strftime(r->date, sizeof r->date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
  }
  if (progress_shown && isatty(2)) fprintf(stderr, "\r%-112s\r", "");
  if (comm) pz_ar_comm_leave_file(comm, &id, (int)rank, id_file);
  const bool reports = rank <= 0; /* one process per rank: rank 0 reports and writes --out */
  if (st != PZ_OK) {
    const char *msg = pz_last_error();
    if (strstr(msg, "; ")) fprintf(stderr, "prezero compare: %s\n", msg);
    else fprintf(stderr, "prezero compare: %s; see 'prezero compare --help'\n", msg);
    if (r->n_points > 0 && reports) pz_cmpout_write_outputs(out, r, true, NULL); /* the concurrencies that completed */
    free(r);
    return 1;
  }
  int rc = reports ? pz_cmpout_write_outputs(out, r, true, NULL) : 0;
  free(r);
  return rc;
#endif
}
