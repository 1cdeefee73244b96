/* prezero run: greedy decode of a preset or config.json through the public engine API; prints
 * the batch's token ids per step and a timing line. Prompt tokens are derived from the seed. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli.h"
#include "model/builder.h"
#include "prezero.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: prezero run [options]\n"
          "  --config NAME|PATH  model preset (%s) or a config.json path (default tiny, embedded)\n"
          "  --tp T              tensor-parallel degree; must divide the attention heads (default 1)\n"
          "  --batch M           sequences decoded together, 1..%d (default 4)\n"
          "  --steps S           decode steps (default 8)\n"
          "  --context L         tokens already in each KV cache (seeded random), context + steps must\n"
          "                      not exceed max_position_embeddings (default 128)\n"
          "  --layers N          run only the first N layers (default: all)\n"
          "  --seed X            seed of the weights, KV cache and prompt tokens (default 1234)\n"
          "  --prezero on|off    run the prezero pass (default: PREZERO_ENABLE, off when unset)\n"
          "  --device cpu        backend (cpu: all TP ranks in this process)\n"
          "  --threads N         CPU worker threads (default: all cores; PREZERO_CPU_THREADS overrides)\n"
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
    default: return "see 'prezero run --help'";
  }
}

static int fail(pz_status s) {
  const char *msg = pz_last_error();
  if (strstr(msg, "; ")) fprintf(stderr, "prezero run: %s\n", msg);
  else fprintf(stderr, "prezero run: %s; %s\n", msg, hint(s));
  return 1;
}

static int parse_int(const char *flag, const char *v, long long lo, long long hi, long long *out) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (!*v || *end || errno) {
    fprintf(stderr, "prezero run: %s needs an integer, got '%s'; see 'prezero run --help'\n", flag, v);
    return 1;
  }
  if (x < lo || x > hi) {
    fprintf(stderr, "prezero run: %s %lld is out of range; use %lld..%lld\n", flag, x, lo, hi);
    return 1;
  }
  *out = x;
  return 0;
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

int pz_cmd_run(int argc, char **argv) {
  pz_engine_config ec = PZ_ENGINE_CONFIG_INIT;
  long long tp = 1, batch = 4, steps = 8, context = 128, layers = 0, threads = 0;
  unsigned long long seed = 1234;
  const char *config = "tiny";
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
    static const char *const takes[] = {"--config", "--tp", "--batch", "--steps", "--context", "--layers",
                                        "--seed", "--prezero", "--device", "--threads"};
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
    if (!strcmp(a, "--config")) config = v;
    else if (!strcmp(a, "--prezero")) {
      if (!strcmp(v, "on")) ec.prezero = 1;
      else if (!strcmp(v, "off")) ec.prezero = 0;
      else { fprintf(stderr, "prezero run: --prezero '%s' is not on or off; use --prezero on|off\n", v); return 2; }
    } else if (!strcmp(a, "--device")) {
      if (!strcmp(v, "cpu")) ec.device = PZ_DEVICE_CPU;
      else if (!strcmp(v, "cuda")) ec.device = PZ_DEVICE_CUDA;
      else { fprintf(stderr, "prezero run: --device '%s' is unknown; use --device cpu\n", v); return 2; }
    } else if (!strcmp(a, "--seed")) {
      char *end;
      errno = 0;
      seed = strtoull(v, &end, 0);
      if (!*v || *end || errno || v[0] == '-') {
        fprintf(stderr, "prezero run: --seed needs a non-negative integer, got '%s'; see 'prezero run --help'\n", v);
        return 2;
      }
    } else {
      /* Integer flags; ranges that depend on the model are checked once the config is read. */
      if (parse_int(a, v, -((long long)1 << 40), (long long)1 << 40, &x)) return 2;
      if (!strcmp(a, "--tp")) tp = x;
      else if (!strcmp(a, "--batch")) batch = x;
      else if (!strcmp(a, "--steps")) steps = x;
      else if (!strcmp(a, "--context")) context = x;
      else if (!strcmp(a, "--layers")) layers = x;
      else if (!strcmp(a, "--threads")) threads = x;
    }
  }
  if (batch < 1 || batch > PZ_ENGINE_MAX_BATCH) {
    fprintf(stderr, "prezero run: --batch %lld is out of range; use --batch 1..%d\n", batch, PZ_ENGINE_MAX_BATCH);
    return 1;
  }
  if (steps < 1 || steps > 1000000) {
    fprintf(stderr, "prezero run: --steps %lld is out of range; use --steps 1..1000000\n", steps);
    return 1;
  }
  if (tp < 1 || tp > 64) {
    fprintf(stderr, "prezero run: --tp %lld is out of range; use a TP degree 1..64 that divides the heads\n", tp);
    return 1;
  }
  if (context < 0) {
    fprintf(stderr, "prezero run: --context %lld is negative; use --context 0 or more\n", context);
    return 1;
  }
  if (layers < 0 || threads < 0) {
    fprintf(stderr, "prezero run: --%s %lld is negative; use a positive value\n", layers < 0 ? "layers" : "threads",
            layers < 0 ? layers : threads);
    return 1;
  }
  /* Model-dependent checks with flag-specific advice (the engine checks them again). */
  pz_model_config mc;
  pz_status st = pz_config_load(config, &mc);
  if (st != PZ_OK) return fail(st);
  if (mc.num_attention_heads % tp) {
    fprintf(stderr, "prezero run: --tp %lld does not divide num_attention_heads (%lld) of %s; use a TP degree that divides it\n",
            tp, (long long)mc.num_attention_heads, mc.name);
    return 1;
  }
  if (context + steps > mc.max_position_embeddings) {
    fprintf(stderr, "prezero run: --context %lld + --steps %lld exceeds max_position_embeddings (%lld) of %s; use a smaller --context\n",
            context, steps, (long long)mc.max_position_embeddings, mc.name);
    return 1;
  }
  if (layers > mc.num_hidden_layers) {
    fprintf(stderr, "prezero run: --layers %lld exceeds num_hidden_layers (%lld) of %s; use --layers 1..%lld\n", layers,
            (long long)mc.num_hidden_layers, mc.name, (long long)mc.num_hidden_layers);
    return 1;
  }

  ec.model = config;
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
  if (st != PZ_OK) return fail(st);
  double t_create = now_s() - t0;
  pz_engine_info info;
  pz_engine_get_info(e, &info);
  printf("# %s: %d layers, tp %d, batch %lld, context %lld, seed %llu, prezero %s, cpu; weights %.1f MiB, KV cache %.1f MiB\n",
         info.model, info.n_layers, info.tp, batch, context, seed, info.prezero ? "on" : "off",
         (double)info.weight_bytes / (1 << 20), (double)info.kv_cache_bytes / (1 << 20));
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
  if (st == PZ_OK)
    printf("timing: %lld steps, %.2f ms/step, %.1f tokens/s (batch %lld; engine created in %.2f s)\n", steps,
           1e3 * t_steps / (double)steps, (double)(steps * batch) / t_steps, batch, t_create);
  free(tok);
  free(next);
  pz_engine_destroy(e);
  return st == PZ_OK ? 0 : fail(st);
}
