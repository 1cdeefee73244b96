/* Synthetic quantised weights of the GQA layouts at TP > 1 (model/quant_synth.h, `--quant int4|fp8`):
 * the stacked per-rank tensors (qkv_proj's q | k | v rows, the dense gate_up_proj's gate | up rows,
 * each a part of its own full tensor) and replicated kv heads must hold the same bytes as the CPU
 * executor's own fill of the bf16 model, so that every TP degree decodes the same seeded model:
 * `prezero run --config qwen3_moe.json --quant int4 --tp 2` gave other tokens than at TP 1. */
#include <math.h>
#include <string.h>
#include <unistd.h>
#include "backend/cpu/cpu_backend.h"
#include "model/builder.h"
#include "model/quant_synth.h"
#include "prezero.h"
#include "pz_test.h"
#include "quant_synth_test.h"

enum { SEED = 4242 };

/* Qwen3-MoE: layer 0 dense (mlp_only_layers, gate_up_proj), layer 1 MoE with experts of 128 columns
 * (INT4 at TP 4 keeps 32 per rank: one group), 4 heads over 2 kv heads (TP 4 replicates them). */
static const char *QWEN3_MOE =
    "{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"intermediate_size\": 128, \"moe_intermediate_size\": 128,"
    " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 16,"
    " \"num_experts\": 8, \"num_experts_per_tok\": 2, \"norm_topk_prob\": true, \"mlp_only_layers\": [0],"
    " \"max_position_embeddings\": 64, \"vocab_size\": 256, \"rope_theta\": 1000000.0}";

static const pz_tensor *find_t(const pz_graph *g, const char *name) {
  for (int i = 0; i < g->n_tensors; i++) if (!strcmp(g->tensors[i].name, name)) return &g->tensors[i];
  return NULL;
}

/* Every weight the bf16 graph and the quantised one share: the synthetic bytes equal the executor's. */
static int same_weights(pz_wquant kind, int tp) {
  pz_model_config c, cq;
  CHECK_OK(pz_config_parse(QWEN3_MOE, strlen(QWEN3_MOE), "qwen3_moe", &c));
  cq = c;
  pz_quant_config_synthetic(kind, &cq.quant);
  pz_build_opts bo = {.tp = tp, .m = 2, .max_ctx = 8, .layers = 2};
  pz_graph *g = NULL, *gq = NULL;
  CHECK_OK(pz_build_decode_graph(&c, &bo, &g));
  CHECK_OK(pz_build_decode_graph(&cq, &bo, &gq));
  if (!g || !gq) exit(1);
  pz_cpu_exec_opts xo = PZ_CPU_EXEC_OPTS_INIT;
  xo.seed = SEED;
  xo.threads = 1;
  pz_cpu_exec *x = NULL;
  CHECK_OK(pz_cpu_exec_create(g, &xo, &x));
  if (!x) exit(1);
  pz_quant_synth q = {.seed = SEED};
  int n_same = 0, n_diff = 0, n_stacked = 0;
  for (int r = 0; r < tp; r++)
    for (int i = 0; i < gq->n_tensors; i++) {
      const pz_tensor *t = &gq->tensors[i], *tb = find_t(g, t->name);
      if (t->kind != PZ_T_WEIGHT || !tb || tb->dtype != t->dtype) continue;
      const int64_t w = t->ne[t->ndim - 1], rows = pz_tensor_numel(t) / w;
      const size_t nb = (size_t)pz_tensor_numel(t) * pz_dtype_size(t->dtype);
      void *d = malloc(nb);
      CHECK_OK(pz_quant_synth_fill_rows(&q, gq, t, r, 0, rows, d));
      if (memcmp(d, pz_cpu_exec_data(x, r, tb->id), nb)) {
        n_diff++;
        fprintf(stderr, "  %s TP %d rank %d: %s differs from the executor's fill\n", pz_wquant_name(kind), tp, r, t->name);
      }
      n_same++;
      n_stacked += strstr(t->name, "qkv_proj") || strstr(t->name, "gate_up_proj");
      free(d);
    }
  CHECK(n_same > 8 && n_stacked >= 2 * tp);
  pz_cpu_exec_free(x);
  pz_graph_free(g);
  pz_graph_free(gq);
  return n_diff;
}

/* The config written to a file, all its layers. */
static pz_status decode(const char *path, int quant, int tp, int32_t *tok, float *lg) {
  return pz_test_decode3(path, 0, quant, tp, SEED, tok, lg);
}

int main(void) {
  CHECK(same_weights(PZ_WQ_INT4, 1) == 0);
  CHECK(same_weights(PZ_WQ_INT4, 2) == 0);
  CHECK(same_weights(PZ_WQ_INT4, 4) == 0); /* kv heads replicated: 2 kv heads over 4 ranks */
  CHECK(same_weights(PZ_WQ_FP8, 2) == 0);

  char path[] = "/tmp/pz_test_qsynth_gqa_XXXXXX.json";
  int fd = mkstemps(path, 5);
  CHECK(fd >= 0);
  if (fd < 0) return 1;
  CHECK(write(fd, QWEN3_MOE, strlen(QWEN3_MOE)) == (ssize_t)strlen(QWEN3_MOE));
  close(fd);
  enum { V = 256 };
  float a[2 * V], b[2 * V];
  int32_t ta[6], tb[6];
  CHECK_OK(decode(path, PZ_QUANT_INT4, 1, ta, a));
  const int tps[2] = {2, 4};
  for (int k = 0; k < 2; k++) { /* the same seeded INT4 model at every TP: the same tokens, logits within rounding */
    CHECK_OK(decode(path, PZ_QUANT_INT4, tps[k], tb, b));
    double md = 0;
    for (int i = 0; i < 2 * V; i++) md = fmax(md, fabs(a[i] - b[i]));
    CHECK(!memcmp(ta, tb, sizeof ta));
    CHECK(md < 1e-3);
    if (md >= 1e-3) fprintf(stderr, "  INT4 TP %d vs TP 1: max |logit diff| %g\n", tps[k], md);
  }
  unlink(path);
  TEST_DONE();
}
