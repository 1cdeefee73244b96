/* prezero run: greedy decode of a preset or config.json through the public engine API; prints
 * the batch's token ids per step and a timing line. Prompt tokens are derived from the seed. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli.h"
#include "cli_args.h"
#include "cli_ranks.h"
#include "model/builder.h"
#include "model/checkpoint.h"
#include "prezero.h"
#include "prezero/allreduce.h" /* PZ_AR_MP_MAX_WORLD */

static void usage(FILE *f) {
  fprintf(f,
          "usage: prezero run [options]\n"
          "  --config NAME|PATH  model preset (%s) or a config.json path (default tiny, embedded)\n"
          "  --tp T              tensor-parallel degree; must divide the attention heads (default 1)\n"
          "  --batch M           sequences decoded together, 1..%d (default 4)\n"
          "  --steps S           decode steps (default 8)\n"
          "  --context L         tokens already in each KV cache (seeded random), context + steps must\n"
          "                      not exceed max_position_embeddings (default 128, or less so that the\n"
          "                      steps fit)\n"
          "  --layers N          run only the first N layers (default: all)\n"
          "  --seed X            seed of the weights, KV cache and prompt tokens (default 1234)\n"
          "  --prezero on|off    run the prezero pass (default: PREZERO_ENABLE, off when unset)\n"
          "  --device cpu|cuda   backend (default: cuda when a GPU is present, else cpu); both run\n"
          "                      all TP ranks in this process (cuda: rank r on GPU r, CUDA graphs per\n"
          "                      batch size, PREZERO_CUDA_GRAPH=0 for eager launches). On cuda without\n"
          "                      --layers, as many layers as fit in GPU memory are run (and reported)\n"
          "  --threads N         CPU worker threads, 0..1024 (default: PREZERO_CPU_THREADS, else 0: all cores,\n"
          "                      at most 64)\n"
          "  --model DIR         Hugging Face checkpoint directory (config.json + model.safetensors or\n"
          "                      model.safetensors.index.json and shards; BF16, F16, F32, block-scaled or\n"
          "                      per-channel FP8, INT4 compressed-tensors pack-quantized or GPTQ: README\n"
          "                      'Checkpoints' lists what is read):\n"
          "                      config and weights from it instead of --config and the seed (on the\n"
          "                      CPU unless --device cuda is given)\n"
          "  --prompt-ids P      real prompts, one per sequence: '1,2,3;4,5' (batch = number of prompts,\n"
          "                      each from an empty KV cache); every prompt token is fed as one decode\n"
          "                      step, then --steps tokens are decoded greedily and printed per sequence\n"
          "  --quant int4|fp8|bf16  routed experts of the seeded weights stored as compressed-tensors INT4\n"
          "                      (group 32, W4A16), FP8 e4m3 with 128x128 block scales (W8A16) or bf16:\n"
          "                      the bf16 model's experts quantised (default: the config's\n"
          "                      quantization_config; kimi_k25 is INT4); CPU and CUDA (W4A16 / W8A16 kernels)\n"
          "  --logits FILE       write the last step's logits, f32 little-endian [batch, vocab] (with\n"
          "                      --prompt-ids: each sequence's row from the step of its last token)\n"
          "  --procs N           one process per TP rank (cuda): forks N ranks (TP N), rank r on GPU\n"
          "                      r %% (visible GPUs), two ranks on one GPU work; rank 0 prints\n"
          "  --rank R --world W --id-file F\n"
          "                      the same, each rank started by you (any launcher): rank R of W\n"
          "                      (TP W), F a fresh path every rank sees (rank 0 writes the rendezvous id)\n"
          "  --timeout-s S       one process per rank: the longest wait on a peer, 1..3600 s (default 60);\n"
          "                      a rank that exits makes the others fail with a timeout, not hang\n"
          "  --help              this text\n"
          "Prints 'step K: <next token id of each sequence>' for K = 1..S, then a timing line\n"
          "(ms per step and generated tokens/s, engine creation excluded).\n",
          pz_config_preset_names(), PZ_ENGINE_MAX_BATCH);
}

static const char *hint(pz_status s) {
  switch (s) {
    case PZ_ERR_CONFIG: return "fix the config.json or use a preset with --config";
    case PZ_ERR_NOT_FOUND: return "use --config with a preset name or a config.json path";
    case PZ_ERR_IO: return "check the path given to --config";
    case PZ_ERR_OOM: return "use --layers N, a smaller --batch or a smaller --context";
    case PZ_ERR_UNSUPPORTED: return "use --device cpu";
    case PZ_ERR_NO_DEVICE: return "use --device cpu or a smaller --tp";
    case PZ_ERR_NO_P2P: return "use --tp 1 or GPUs with peer access";
    default: return "see 'prezero run --help'";
  }
}

static int fail(pz_status s) {
  const char *msg = pz_last_error();
  if (s == PZ_ERR_NO_DEVICE && strstr(msg, "one rank per process")) /* --procs / --rank without a GPU */
    fprintf(stderr, "prezero run: %s (without a GPU, run every rank in one process: --device cpu --tp N)\n", msg);
  else if (strstr(msg, "; ")) fprintf(stderr, "prezero run: %s\n", msg);
  else fprintf(stderr, "prezero run: %s; %s\n", msg, hint(s));
  /* The engine refuses flag values that do not fit the model (a --tp that does not divide the
   * vocabulary, ...) as invalid arguments: usage errors, like the same checks made here. */
  return s == PZ_ERR_INVALID_ARG ? PZ_CLI_EXIT_USAGE : PZ_CLI_EXIT_ERROR;
}

/* One integer flag of this subcommand (tools/cli_args.h: one line on error, exit code 2). */
static int parse_int(const char *flag, const char *v, long long lo, long long hi, long long *out) {
  return pz_cli_parse_int("run", flag, v, lo, hi, out);
}

static uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* --prompt-ids "1,2,3;4,5": sequences of token ids. */
typedef struct prompts {
  int n, max_len, len_total;
  int32_t *tok;             /* all tokens, sequence after sequence */
  int *off, *len;           /* [n] */
} prompts;

static void free_prompts(prompts *p) {
  free(p->tok);
  free(p->off);
  free(p->len);
  memset(p, 0, sizeof *p);
}

static int parse_prompts(const char *arg, prompts *p) {
  size_t cap = strlen(arg) + 1;
  p->tok = malloc(sizeof(int32_t) * cap);
  p->off = malloc(sizeof(int) * cap);
  p->len = malloc(sizeof(int) * cap);
  if (!p->tok || !p->off || !p->len) {
    free_prompts(p);
    fprintf(stderr, "prezero run: out of memory parsing --prompt-ids; use shorter prompts\n");
    return 1;
  }
  const char *s = arg;
  for (;;) {
    p->off[p->n] = p->len_total;
    p->len[p->n] = 0;
    for (;;) {
      char *end;
      errno = 0;
      long v = strtol(s, &end, 10);
      if (!pz_cli_starts_number(s) || end == s || errno || v < 0 || v > INT32_MAX || (*end && *end != ',' && *end != ';')) {
        fprintf(stderr, "prezero run: --prompt-ids '%s' is not a list of token ids; use e.g. --prompt-ids '1,2,3;4,5'\n", arg);
        free_prompts(p);
        return 1;
      }
      p->tok[p->len_total++] = (int32_t)v;
      p->len[p->n]++;
      s = end;
      if (*s != ',') break;
      s++;
    }
    if (p->len[p->n] > p->max_len) p->max_len = p->len[p->n];
    p->n++;
    if (!*s) break;
    s++; /* ';' */
  }
  if (p->n > PZ_ENGINE_MAX_BATCH) {
    fprintf(stderr, "prezero run: --prompt-ids has %d prompts; use at most %d\n", p->n, PZ_ENGINE_MAX_BATCH);
    free_prompts(p);
    return 1;
  }
  return 0;
}

/* f32 little-endian, whatever the host order. Returns 0 or prints one error line. */
static int write_logits(const char *path, const float *v, long long n) {
  FILE *f = fopen(path, "wb");
  int ok = f != NULL;
  for (long long i = 0; i < n && ok; i++) {
    uint32_t u;
    memcpy(&u, &v[i], 4);
    unsigned char b[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16), (unsigned char)(u >> 24)};
    ok = fwrite(b, 1, 4, f) == 4;
  }
  if (f && fclose(f) != 0) ok = 0;
  if (!ok) fprintf(stderr, "prezero run: cannot write --logits %s (%s); check the path\n", path, strerror(errno));
  return !ok;
}

/* Prompt mode: sequence i feeds its own prompt one token per step from position 0, then its
 * greedy tokens; sequences of different lengths run side by side (each at its own position)
 * until every one has `steps` new tokens. Prints "seq I: <tokens>". Logits row i is taken from
 * the step that produced sequence i's last token. */
static int run_prompts(pz_engine *e, const pz_engine_info *info, const prompts *p, long long steps,
                       const char *logits_path, double t_create) {
  const int n = p->n;
  const int64_t V = info->vocab_size;
  const long long total = p->max_len - 1 + steps;
  int32_t *tok = malloc(sizeof(int32_t) * (size_t)n), *next = malloc(sizeof(int32_t) * (size_t)n);
  int32_t *gen = malloc(sizeof(int32_t) * (size_t)(n * steps));
  float *lg = logits_path ? malloc(sizeof(float) * (size_t)(n * V)) : NULL;
  float *out = logits_path ? malloc(sizeof(float) * (size_t)(n * V)) : NULL;
  pz_status st = PZ_OK;
  if (!tok || !next || !gen || (logits_path && (!lg || !out))) st = pz_error(PZ_ERR_OOM, "prompt buffers");
  for (int i = 0; i < n && st == PZ_OK; i++) tok[i] = p->tok[p->off[i]];
  double t_steps = 0;
  for (long long t = 0; t < total && st == PZ_OK; t++) {
    double t1 = now_s();
    st = pz_engine_step(e, n, tok, next);
    t_steps += now_s() - t1;
    bool got = false;
    for (int i = 0; i < n && st == PZ_OK; i++) {
      long long k = t + 1 - p->len[i]; /* index of the token this step generated for sequence i */
      if (k < 0) { tok[i] = p->tok[p->off[i] + t + 1]; continue; }
      if (k < steps) gen[i * steps + k] = next[i];
      if (k == steps - 1 && out) {
        if (!got) st = pz_engine_logits(e, n, lg);
        got = true;
        memcpy(out + i * V, lg + i * V, sizeof(float) * (size_t)V);
      }
      tok[i] = next[i];
    }
  }
  if (st == PZ_OK) {
    for (int i = 0; i < n; i++) {
      printf("seq %d:", i);
      for (long long k = 0; k < steps; k++) printf(" %d", gen[i * steps + k]);
      printf("\n");
    }
    printf("timing: %lld steps, %.2f ms/step (batch %d; engine created in %.2f s)\n", total,
           1e3 * t_steps / (double)total, n, t_create);
  }
  int rc = st == PZ_OK ? 0 : fail(st);
  if (rc == 0 && out && info->rank <= 0 && write_logits(logits_path, out, (long long)n * V)) rc = 1;
  free(tok); free(next); free(gen); free(lg); free(out);
  return rc;
}

int pz_cmd_run(int argc, char **argv) {
  pz_engine_config ec = PZ_ENGINE_CONFIG_INIT;
  long long tp = 1, batch = 4, steps = 8, context = 128, layers = 0, threads = 0;
  unsigned long long seed = 1234;
  const char *config = "tiny";
  const char *model_dir = NULL, *prompt_arg = NULL, *logits_path = NULL;
  bool config_given = false, layers_given = false, context_given = false;
  prompts pr = {0};
  bool device_given = false;
  long long procs = 0, rank = -1, world = 0, timeout_s = 60;
  bool procs_given = false, rank_given = false;
  const char *id_file = NULL;
  char id_buf[256];
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
    static const char *const takes[] = {"--config", "--tp", "--batch", "--steps", "--context", "--layers",
                                        "--seed", "--prezero", "--device", "--threads",
                                        "--model", "--prompt-ids", "--logits", "--quant",
                                        "--procs", "--rank", "--world", "--id-file", "--timeout-s"};
    bool known = false;
    for (size_t k = 0; k < sizeof takes / sizeof takes[0]; k++) known |= !strcmp(a, takes[k]);
    if (!known) {
      fprintf(stderr, "prezero run: unknown option '%s'; see 'prezero run --help'\n", a);
      return 2;
    }
    if (!v) {
      fprintf(stderr, "prezero run: %s needs a value; see 'prezero run --help'\n", a);
      return 2;
    }
    i++;
    long long x = 0;
    if (!strcmp(a, "--config")) { config = v; config_given = true; }
    else if (!strcmp(a, "--model")) {
      if (pz_cli_empty_model_flag("run", a, v, NULL)) return PZ_CLI_EXIT_USAGE;
      model_dir = v;
    }
    else if (!strcmp(a, "--prompt-ids")) prompt_arg = v;
    else if (!strcmp(a, "--logits")) logits_path = v;
    else if (!strcmp(a, "--id-file")) id_file = v;
    else if (!strcmp(a, "--quant")) {
      if (!strcmp(v, "int4")) ec.quant = PZ_QUANT_INT4;
      else if (!strcmp(v, "fp8")) ec.quant = PZ_QUANT_FP8;
      else if (!strcmp(v, "bf16")) ec.quant = PZ_QUANT_BF16;
      else { fprintf(stderr, "prezero run: --quant '%s' is unknown; use --quant int4, fp8 or bf16\n", v); return 2; }
    } else if (!strcmp(a, "--prezero")) {
      if (!strcmp(v, "on")) ec.prezero = 1;
      else if (!strcmp(v, "off")) ec.prezero = 0;
      else { fprintf(stderr, "prezero run: --prezero '%s' is not on or off; use --prezero on|off\n", v); return 2; }
    } else if (!strcmp(a, "--device")) {
      if (!strcmp(v, "cpu")) ec.device = PZ_DEVICE_CPU;
      else if (!strcmp(v, "cuda")) ec.device = PZ_DEVICE_CUDA;
      else { fprintf(stderr, "prezero run: --device '%s' is unknown; use --device cpu or --device cuda\n", v); return 2; }
      device_given = true;
    } else if (!strcmp(a, "--seed")) {
      /* Decimal, or hex with 0x (never octal): the rule every command shares (cli_args.h). */
      if (pz_cli_parse_seed(v, &seed)) {
        fprintf(stderr, "prezero run: --seed needs a non-negative integer, got '%s'; see 'prezero run --help'\n", v);
        return 2;
      }
    } else {
      /* Integer flags; ranges that depend on the model are checked once the config is read. */
      if (parse_int(a, v, -((long long)1 << 40), (long long)1 << 40, &x)) return 2;
      if (!strcmp(a, "--tp")) tp = x;
      else if (!strcmp(a, "--batch")) batch = x;
      else if (!strcmp(a, "--steps")) steps = x;
      else if (!strcmp(a, "--context")) { context = x; context_given = true; }
      else if (!strcmp(a, "--layers")) { layers = x; layers_given = true; }
      else if (!strcmp(a, "--threads")) threads = x;
      else if (!strcmp(a, "--procs")) { procs = x; procs_given = true; }
      else if (!strcmp(a, "--rank")) { rank = x; rank_given = true; }
      else if (!strcmp(a, "--world")) world = x;
      else if (!strcmp(a, "--timeout-s")) timeout_s = x;
    }
  }
  /* One process per rank: --procs N, or --rank/--world/--id-file (all three). */
  const bool sep = rank_given || world || id_file;
  if (pz_cli_ranks_form("run", procs_given, sep, rank, world, id_file)) return PZ_CLI_EXIT_USAGE;
  if (procs_given && (procs < 2 || procs > PZ_AR_MP_MAX_WORLD)) {
    fprintf(stderr, "prezero run: --procs %lld is out of range; use --procs 2..%d (or leave it out)\n", procs,
            PZ_AR_MP_MAX_WORLD);
    return PZ_CLI_EXIT_USAGE;
  }
  if (timeout_s < 1 || timeout_s > 3600) {
    fprintf(stderr, "prezero run: --timeout-s %lld is out of range; use --timeout-s 1..3600\n", timeout_s);
    return PZ_CLI_EXIT_USAGE;
  }
  const long long nranks = procs ? procs : world;
  if (nranks) {
    bool tp_flag = false;
    for (int i = 1; i + 1 < argc; i++) tp_flag |= !strcmp(argv[i], "--tp");
    if (tp_flag && tp != nranks) {
      fprintf(stderr, "prezero run: --tp %lld but %lld ranks (%s); leave --tp out or make them equal\n", tp, nranks,
              procs ? "--procs" : "--world");
      return PZ_CLI_EXIT_USAGE;
    }
    tp = nranks;
    if (device_given && ec.device != PZ_DEVICE_CUDA) {
      fprintf(stderr, "prezero run: one process per rank runs on the CUDA backend; drop --device cpu\n");
      return PZ_CLI_EXIT_USAGE;
    }
    if (model_dir) {
      fprintf(stderr, "prezero run: one process per rank takes seeded weights only for now; drop --model or the ranks\n");
      return PZ_CLI_EXIT_USAGE;
    }
  }
  if (model_dir && config_given) {
    fprintf(stderr, "prezero run: --model and --config both give the model; use one of them\n");
    return PZ_CLI_EXIT_USAGE;
  }
  if (model_dir && ec.quant != PZ_QUANT_AUTO) {
    fprintf(stderr, "prezero run: --quant sets synthetic weights, --model's weights come as stored; drop one of them\n");
    return PZ_CLI_EXIT_USAGE;
  }
  /* --batch and --context are checked even where --prompt-ids overrides them: a bad value is an
   * error whether or not it is used. */
  if (batch < 1 || batch > PZ_ENGINE_MAX_BATCH) {
    fprintf(stderr, "prezero run: --batch %lld is out of range; use --batch 1..%d\n", batch, PZ_ENGINE_MAX_BATCH);
    return PZ_CLI_EXIT_USAGE;
  }
  if (context < 0) {
    fprintf(stderr, "prezero run: --context %lld is negative; use --context 0 or more\n", context);
    return PZ_CLI_EXIT_USAGE;
  }
  const long long context_arg = context; /* range-checked below against the model even with --prompt-ids */
  if (steps < 1 || steps > 1000000) {
    fprintf(stderr, "prezero run: --steps %lld is out of range; use --steps 1..1000000\n", steps);
    return PZ_CLI_EXIT_USAGE;
  }
  if (tp < 1 || tp > 64) {
    fprintf(stderr, "prezero run: --tp %lld is out of range; use a TP degree 1..64 that divides the heads\n", tp);
    return PZ_CLI_EXIT_USAGE;
  }
  if (config_given && !config[0]) {
    fprintf(stderr, "prezero run: --config is empty; use a preset (%s) or a config.json path\n", pz_config_preset_names());
    return 2;
  }
  if (layers_given && layers < 1) {
    fprintf(stderr, "prezero run: --layers %lld is out of range; use --layers 1 or more (leave it out for all layers)\n",
            layers);
    return PZ_CLI_EXIT_USAGE;
  }
  if (threads < 0 || threads > 1024) {
    fprintf(stderr, "prezero run: --threads %lld is out of range; use --threads 1..1024 (0 or leave it out: all cores)\n",
            threads);
    return PZ_CLI_EXIT_USAGE;
  }
  /* Parsed after the checks above, which return without freeing it. */
  if (prompt_arg) {
    if (parse_prompts(prompt_arg, &pr)) return 2;
    batch = pr.n;
    context = 0;
  }
  if (logits_path && !logits_path[0]) {
    fprintf(stderr, "prezero run: --logits is empty; give it a file path, e.g. --logits logits.f32\n");
    free_prompts(&pr);
    return PZ_CLI_EXIT_USAGE;
  }
  /* A --logits path that cannot be written fails now, not after the whole decode. */
  if (logits_path) {
    FILE *lf = fopen(logits_path, "wb");
    if (!lf || fclose(lf) != 0) {
      fprintf(stderr, "prezero run: cannot write --logits %s (%s); check the path\n", logits_path, strerror(errno));
      free_prompts(&pr);
      return 1;
    }
  }
  /* Model-dependent checks with flag-specific advice (the engine checks them again). */
  pz_model_config mc;
  pz_status st = model_dir ? pz_checkpoint_load_config(model_dir, &mc) : pz_config_load(config, &mc);
  if (st != PZ_OK) {
    free_prompts(&pr);
    int rc = model_dir ? 0 : pz_cli_config_dir("run", config, 1); /* a checkpoint directory given to --config */
    return rc ? rc : fail(st);
  }
  /* Prompt mode: the KV cache needs room for the longest prompt plus the decoded tokens. */
  if (prompt_arg) steps += pr.max_len - 1;
  for (int i = 0; i < pr.len_total; i++)
    if (pr.tok[i] >= mc.vocab_size) {
      fprintf(stderr, "prezero run: --prompt-ids token %d is out of range; use ids 0..%lld (vocab_size of %s)\n",
              pr.tok[i], (long long)mc.vocab_size - 1, mc.name);
      free_prompts(&pr);
      return PZ_CLI_EXIT_USAGE;
    }
  if (mc.num_attention_heads % tp) {
    fprintf(stderr, "prezero run: --tp %lld does not divide num_attention_heads (%lld) of %s; use a TP degree that divides it\n",
            tp, (long long)mc.num_attention_heads, mc.name);
    free_prompts(&pr);
    return PZ_CLI_EXIT_USAGE;
  }
  if (prompt_arg && context_given && context_arg >= mc.max_position_embeddings) {
    fprintf(stderr, "prezero run: --context %lld is out of range for %s (max_position_embeddings %lld); use --context "
            "0..%lld, or drop it (--prompt-ids starts each sequence from an empty KV cache)\n",
            context_arg, mc.name, (long long)mc.max_position_embeddings, (long long)mc.max_position_embeddings - 1);
    free_prompts(&pr);
    return PZ_CLI_EXIT_USAGE;
  }
  if (prompt_arg && context + steps > mc.max_position_embeddings) {
    fprintf(stderr, "prezero run: the longest --prompt-ids prompt (%d tokens) + --steps %lld exceeds max_position_embeddings "
            "(%lld) of %s; use shorter prompts or fewer --steps\n",
            pr.max_len, steps - (pr.max_len - 1), (long long)mc.max_position_embeddings, mc.name);
    free_prompts(&pr);
    return PZ_CLI_EXIT_USAGE;
  }
  /* Without --context the seeded KV-cache prefix shrinks to leave room for the steps (a small
   * checkpoint's max_position_embeddings can be below the default 128 + steps). */
  if (!context_given && !prompt_arg) {
    if (steps > mc.max_position_embeddings) {
      fprintf(stderr, "prezero run: --steps %lld exceeds max_position_embeddings (%lld) of %s; use --steps 1..%lld\n",
              steps, (long long)mc.max_position_embeddings, mc.name, (long long)mc.max_position_embeddings);
      return PZ_CLI_EXIT_USAGE;
    }
    if (context + steps > mc.max_position_embeddings) context = mc.max_position_embeddings - steps;
  }
  if (context + steps > mc.max_position_embeddings) {
    fprintf(stderr, "prezero run: --context %lld + --steps %lld exceeds max_position_embeddings (%lld) of %s; use a smaller --context\n",
            context, steps, (long long)mc.max_position_embeddings, mc.name);
    return PZ_CLI_EXIT_USAGE;
  }
  if (layers > mc.num_hidden_layers) {
    fprintf(stderr, "prezero run: --layers %lld exceeds num_hidden_layers (%lld) of %s; use --layers 1..%lld\n", layers,
            (long long)mc.num_hidden_layers, mc.name, (long long)mc.num_hidden_layers);
    free_prompts(&pr);
    return PZ_CLI_EXIT_USAGE;
  }

  if (procs) {
    /* Fork the ranks now, before any CUDA call; each child goes on as its rank. */
    int prc = 0;
    int r = pz_cli_fork_ranks("run", (int)procs, 2.0 * (double)timeout_s + 10.0, id_buf, sizeof id_buf, &prc);
    if (r < 0) {
      free_prompts(&pr);
      return prc;
    }
    rank = r;
    world = procs;
    id_file = id_buf;
  }
  if (nranks) {
    ec.device = PZ_DEVICE_CUDA;
    device_given = true;
    ec.id_file = id_file;
    ec.rank = (int)rank;
    ec.timeout_ms = (int)(timeout_s * 1000);
  }
  if (!device_given) { /* cuda when the GPUs for this TP are visible; otherwise the CPU, said aloud */
    int ngpu = pz_gpu_count();
    ec.device = ngpu >= tp ? PZ_DEVICE_CUDA : PZ_DEVICE_CPU;
    if (ngpu > 0 && ngpu < tp)
      fprintf(stderr, "prezero run: note: %d GPU%s visible and --tp %lld needs %lld: running on the CPU backend "
              "(--device cuda insists)\n", ngpu, ngpu == 1 ? "" : "s", (long long)tp, (long long)tp);
  }
  ec.model = config;
  if (model_dir) {
    ec.model_dir = model_dir;
    ec.model = NULL;
    bool dev_flag = false; /* checkpoints load on the CPU backend unless a device is asked for */
    for (int i = 1; i + 1 < argc; i++) dev_flag |= !strcmp(argv[i], "--device");
    if (!dev_flag) ec.device = PZ_DEVICE_CPU;
  }
  ec.tp = (int)tp;
  ec.max_batch = (int)batch;
  ec.context = (int)context;
  ec.max_steps = (int)steps;
  ec.layers = (int)layers;
  ec.seed = seed;
  ec.threads = (int)threads;
  pz_engine *e = NULL;
  double t0 = now_s();
  st = pz_engine_create(&ec, &e);
  if (st != PZ_OK) { free_prompts(&pr); return fail(st); }
  double t_create = now_s() - t0;
  pz_engine_info info;
  pz_engine_get_info(e, &info);
  /* The seed makes the weights, the KV-cache prefix and the prompt tokens; with --model the
   * weights are the checkpoint's, and with --prompt-ids too nothing is seeded. */
  char seed_txt[64];
  if (!model_dir) snprintf(seed_txt, sizeof seed_txt, "seed %llu", seed);
  else if (!prompt_arg) snprintf(seed_txt, sizeof seed_txt, "seed %llu (prompts and KV cache)", seed);
  else snprintf(seed_txt, sizeof seed_txt, "weights from --model");
  printf("# %s: %d layers, tp %d, batch %lld, context %lld, %s, prezero %s, %s; weights %.1f MiB, KV cache %.1f MiB\n",
         info.model, info.n_layers, info.tp, batch, context, seed_txt, info.prezero ? "on" : "off",
         info.device == PZ_DEVICE_CUDA ? "cuda" : "cpu", (double)info.weight_bytes / (1 << 20),
         (double)info.kv_cache_bytes / (1 << 20));
  if (info.gemm_table[0]) printf("# split-K GEMM choices: tuner table %s\n", info.gemm_table);
  if ((ec.quant == PZ_QUANT_INT4 || ec.quant == PZ_QUANT_FP8) && mc.n_routed_experts <= 0)
    printf("# note: --quant %s has no effect: %s has no routed experts (only they are quantised); its weights are bf16\n",
           ec.quant == PZ_QUANT_INT4 ? "int4" : "fp8", info.model);
  if (info.layers_fitted)
    printf("# note: only the first %d of %s's %d layers fit in GPU memory (%.1f GiB per GPU); running those "
           "(use --layers N to choose, a higher --tp for more)\n",
           info.n_layers, info.model, info.model_layers, (double)info.device_bytes_per_rank / (1 << 30));
  if (prompt_arg) {
    int rc = run_prompts(e, &info, &pr, steps - (pr.max_len - 1), logits_path, t_create);
    free_prompts(&pr);
    pz_engine_destroy(e);
    return rc;
  }
  int32_t *tok = malloc(sizeof(int32_t) * (size_t)batch), *next = malloc(sizeof(int32_t) * (size_t)batch);
  if (!tok || !next) {
    free(tok); free(next); pz_engine_destroy(e);
    fprintf(stderr, "prezero run: out of memory; use a smaller --batch\n");
    return 1;
  }
  for (long long i = 0; i < batch; i++) tok[i] = (int32_t)(splitmix64(seed ^ splitmix64((uint64_t)i)) % (uint64_t)info.vocab_size);
  printf("prompt:");
  for (long long i = 0; i < batch; i++) printf(" %d", tok[i]);
  printf("\n");
  double t_steps = 0;
  for (long long s = 1; s <= steps && st == PZ_OK; s++) {
    double t1 = now_s();
    st = pz_engine_step(e, (int)batch, tok, next);
    t_steps += now_s() - t1;
    if (st != PZ_OK) break;
    printf("step %lld:", s);
    for (long long i = 0; i < batch; i++) printf(" %d", next[i]);
    printf("\n");
    fflush(stdout);
    memcpy(tok, next, sizeof(int32_t) * (size_t)batch);
  }
  if (st == PZ_OK && logits_path) {
    float *lg = malloc(sizeof(float) * (size_t)(batch * info.vocab_size));
    st = lg ? pz_engine_logits(e, (int)batch, lg) : pz_error(PZ_ERR_OOM, "logits buffer"); /* every rank: collective */
    /* one process per rank: every rank holds the same logits; rank 0 writes them */
    if (st == PZ_OK && info.rank <= 0 && write_logits(logits_path, lg, batch * info.vocab_size)) st = PZ_ERR_IO;
    free(lg);
    if (st == PZ_ERR_IO) { free(tok); free(next); pz_engine_destroy(e); return 1; }
  }
  if (st == PZ_OK)
    printf("timing: %lld steps, %.2f ms/step, %.1f tokens/s (batch %lld; engine created in %.2f s)\n", steps,
           1e3 * t_steps / (double)steps, (double)(steps * batch) / t_steps, batch, t_create);
  free(tok);
  free(next);
  /* the error first: the destroy of a rank whose peer is gone must not hide it */
  const int rc = st == PZ_OK ? 0 : fail(st);
  fflush(stderr);
  pz_engine_destroy(e);
  return rc;
}
