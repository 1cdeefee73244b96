/* The GQA decode graph (model/builder.h) and its CPU decode:
 *  - structure of tiny dense and MoE GQA configs (by hand, and every GQA preset) at TP 1/2/4/8:
 *    node ops, roles and order per layer, per-rank shapes from the config arithmetic, the parts
 *    of the fused qkv_proj / gate_up_proj weights, kv heads replicated when TP > num_key_value_heads,
 *    tied embeddings; the refusals (one line naming the field); the presets' full parameter
 *    counts at every TP against the published ones;
 *  - the seeded fill gives every TP degree the same full weights and caches: each rank's rows of
 *    the fused, sharded and replicated tensors equal the TP 1 rows this test maps them to;
 *  - the first decode step's logits at TP 1 equal a recomputation with the reference ops
 *    (backend/cpu/ref_ops.h) wired here by hand, bit for bit;
 *  - several teacher-forced steps at TP 2/4/8 match TP 1 within LOGIT_TOL, free-running greedy
 *    tokens are identical (also for the tiny_llama and tiny_qwen3_moe presets, TP 2/4). */
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/ref_ops.h"
#include "model/builder.h"
#include "model/config.h"
#include "pz_test.h"
#include <string.h>

#define BATCH 3
#define CTX 40
#define STEPS 6
/* TP changes only the order of the f32 sums (each rank's o_proj / down_proj / expert partial is
 * a row-parallel slice of the K sum, and the all-reduce adds the ranks in order). That moves the
 * residual by ~1e-7 relative, which now and then flips the bf16 rounding of one x_norm or
 * attention element (one bf16 ulp, 2^-8 relative). One flip in the final x_norm (|x| ~ 1) moves
 * a logit by |W_lm| * 2^-8: <= 5e-4 with lm_head's 1/sqrt(H) = 0.125 scale, <= 4e-3 with the tied
 * embedding (scale 1). LOGIT_TOL allows a few such flips (measured max 1.2e-4 over the three
 * models at TP 2/4/8); a wrong head, kv-head or shard mapping moves logits by O(0.1). */
#define LOGIT_TOL 1e-2

static const pz_tensor *T(const pz_graph *g, int id) { return id >= 0 ? &g->tensors[id] : NULL; }
static const pz_node *find(const pz_graph *g, const char *name) {
  for (int i = 0; i < g->n_nodes; i++)
    if (!strcmp(g->nodes[i].name, name)) return &g->nodes[i];
  return NULL;
}
/* t exists, is called nm and has ne[0] == ne0 */
static int named(const pz_tensor *t, const char *nm, int64_t ne0) { return t && !strcmp(t->name, nm) && t->ne[0] == ne0; }
static int is2(const pz_tensor *t, int64_t a, int64_t b) { return t && t->ndim == 2 && t->ne[0] == a && t->ne[1] == b; }

static pz_model_config base_cfg(const char *name) {
  pz_model_config c;
  memset(&c, 0, sizeof c);
  snprintf(c.name, sizeof c.name, "%s", name);
  c.attn = PZ_ATTN_GQA;
  c.hidden_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.intermediate_size = 128;
  c.vocab_size = 256;
  c.max_position_embeddings = 512;
  c.rms_norm_eps = 1e-6f;
  c.moe_layer_freq = 1;
  c.decoder_sparse_step = 1;
  c.n_group = c.topk_group = 1;
  c.topk_method = PZ_TOPK_GREEDY;
  c.scoring_func = PZ_SCORE_SOFTMAX;
  c.routed_scaling_factor = 1.f;
  c.rope = (pz_rope_params){.theta = 10000.f, .factor = 1.f, .type = PZ_ROPE_DEFAULT};
  return c;
}

/* Llama 3.1 / Qwen2-like: qkv bias, llama3 RoPE, dense MLP in every layer. */
static pz_model_config dense_cfg(void) {
  pz_model_config c = base_cfg("gqa_dense");
  snprintf(c.model_type, sizeof c.model_type, "qwen2");
  c.attention_bias = true;
  c.rope = (pz_rope_params){.theta = 500000.f, .factor = 8.f, .original_max_position_embeddings = 32,
                            .type = PZ_ROPE_LLAMA3, .low_freq_factor = 1.f, .high_freq_factor = 4.f};
  return c;
}

/* Qwen3-MoE-like: q/k norm, layer 0 dense (mlp_only_layers [0]; first_k_dense_replace 1 says the
 * same under the DeepSeek rule), layers 1-2 MoE with softmax + norm_topk_prob, no shared experts. */
static pz_model_config moe_cfg(void) {
  pz_model_config c = base_cfg("gqa_moe");
  snprintf(c.model_type, sizeof c.model_type, "qwen3_moe");
  c.num_hidden_layers = 3;
  c.qk_norm = true;
  c.rope.theta = 1000000.f;
  c.n_routed_experts = 8;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 32;
  c.norm_topk_prob = true;
  c.first_k_dense_replace = 1;
  c.n_mlp_only = 1;
  c.mlp_only_layers[0] = 0;
  return c;
}

/* Mixtral-like: every layer MoE, top-k softmax routing, tied embeddings, 4 kv heads. */
static pz_model_config mixtral_cfg(void) {
  pz_model_config c = base_cfg("gqa_mixtral");
  snprintf(c.model_type, sizeof c.model_type, "mixtral");
  c.num_key_value_heads = 4;
  c.n_routed_experts = 4;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 64;
  c.scoring_func = PZ_SCORE_TOPK_SOFTMAX;
  c.norm_topk_prob = true;
  c.tie_word_embeddings = true;
  return c;
}

/* Hugging Face Qwen3MoeDecoderLayer's rule: MoE when experts exist, (L + 1) % decoder_sparse_step
 * == 0 and L is not in mlp_only_layers. */
static bool layer_moe(const pz_model_config *c, int L) {
  if (c->n_routed_experts <= 0 || (L + 1) % c->decoder_sparse_step) return false;
  for (int i = 0; i < c->n_mlp_only; i++)
    if (c->mlp_only_layers[i] == L) return false;
  return true;
}

static pz_graph *build(const pz_model_config *c, int tp, int64_t m, int64_t ctx) {
  pz_build_opts o = PZ_BUILD_OPTS_INIT;
  o.tp = tp;
  o.m = m;
  o.max_ctx = ctx;
  pz_graph *g = NULL;
  CHECK_OK(pz_build_decode_graph(c, &o, &g));
  return g;
}

/* ------------------------------------------------------------------ structure */

static void refused(const pz_model_config *c, int tp, const char *field);

static void check_structure(const pz_model_config *c, int tp) {
  const int64_t m = 4, ctx = 32, H = c->hidden_size, d = c->head_dim, NH = c->num_attention_heads;
  const int64_t NKV = c->num_key_value_heads, heads = NH / tp, kvh = NKV >= tp ? NKV / tp : 1;
  const int64_t I = c->intermediate_size / tp, MI = c->moe_intermediate_size / tp, V = c->vocab_size / tp;
  pz_graph *g = build(c, tp, m, ctx);
  if (!g) return;
  const int L = (int)c->num_hidden_layers;
  /* the node sequence: embedding, per layer the GQA block, final norm, lm_head, argmax */
  pz_op *want_op = malloc(sizeof(pz_op) * (size_t)(7 * L + 4));
  pz_role *want_role = malloc(sizeof(pz_role) * (size_t)(7 * L + 4));
  int nw = 0;
  want_op[nw] = PZ_OP_EMBEDDING, want_role[nw++] = PZ_ROLE_EMBED;
  for (int l = 0; l < L; l++) {
    const pz_op ops[] = {PZ_OP_AR_RMSNORM, PZ_OP_GEMM, PZ_OP_GQA_ATTN, PZ_OP_AR_RMSNORM};
    const pz_role roles[] = {PZ_ROLE_INPUT_LAYERNORM, PZ_ROLE_QKV_PROJ, PZ_ROLE_ATTN, PZ_ROLE_POST_ATTN_LAYERNORM};
    for (int k = 0; k < 4; k++) want_op[nw] = ops[k], want_role[nw++] = roles[k];
    if (layer_moe(c, l)) {
      want_op[nw] = PZ_OP_GEMM, want_role[nw++] = PZ_ROLE_ROUTER_GATE;
      want_op[nw] = PZ_OP_MOE, want_role[nw++] = PZ_ROLE_MOE;
    } else {
      want_op[nw] = PZ_OP_GEMM, want_role[nw++] = PZ_ROLE_GATE_UP;
      want_op[nw] = PZ_OP_SILU_MUL, want_role[nw++] = PZ_ROLE_MLP_ACT;
      want_op[nw] = PZ_OP_GEMM, want_role[nw++] = PZ_ROLE_DOWN_PROJ;
    }
  }
  want_op[nw] = PZ_OP_AR_RMSNORM, want_role[nw++] = PZ_ROLE_FINAL_NORM;
  want_op[nw] = PZ_OP_LM_HEAD, want_role[nw++] = PZ_ROLE_LM_HEAD;
  want_op[nw] = PZ_OP_ARGMAX, want_role[nw++] = PZ_ROLE_ARGMAX;
  CHECK(g->n_nodes == nw);
  for (int i = 0; i < nw && i < g->n_nodes; i++) {
    const pz_node *n = &g->nodes[i];
    CHECK(n->op == want_op[i] && n->role == want_role[i]);
    if (n->layer >= 0) {
      char nm[PZ_NAME_LEN];
      snprintf(nm, sizeof nm, "layers.%d.%s", n->layer, pz_role_suffix(n->role));
      CHECK(!strcmp(nm, n->name));
    }
  }
  char nm[PZ_NAME_LEN];
  for (int l = 0; l < L; l++) {
    snprintf(nm, sizeof nm, "layers.%d.input_layernorm", l);
    const pz_node *n1 = find(g, nm);
    snprintf(nm, sizeof nm, "layers.%d.self_attn.qkv_proj", l);
    const pz_node *q = find(g, nm);
    snprintf(nm, sizeof nm, "layers.%d.self_attn", l);
    const pz_node *a = find(g, nm);
    snprintf(nm, sizeof nm, "layers.%d.post_attention_layernorm", l);
    const pz_node *n2 = find(g, nm);
    CHECK(n1 && q && a && n2);
    if (!n1 || !q || !a || !n2) continue;
    /* qkv_proj: [m, H] x [(heads + 2 kvh) d, H]^T (+ bias), parts q | k | v */
    const int64_t nq = (heads + 2 * kvh) * d;
    const pz_tensor *w = T(g, q->src[1]), *bias = T(g, q->src[2]);
    CHECK(q->src[0] == n1->dst[0] && is2(w, nq, H) && w->dtype == PZ_BF16 && w->shard_dim == 0 && w->n_parts == 3);
    snprintf(nm, sizeof nm, "layers.%d.self_attn.qkv_proj.weight", l);
    CHECK(!strcmp(w->name, nm));
    CHECK(w->part_ne[0] == heads * d && w->part_ne[1] == kvh * d && w->part_ne[2] == kvh * d);
    CHECK(w->part_full[0] == NH * d && w->part_full[1] == NKV * d && w->part_full[2] == NKV * d);
    CHECK(w->full_ne[0] == (NH + 2 * NKV) * d && w->full_ne[1] == H);
    if (c->attention_bias) {
      snprintf(nm, sizeof nm, "layers.%d.self_attn.qkv_proj.bias", l);
      CHECK(bias && bias->dtype == PZ_F32 && bias->ndim == 1 && bias->ne[0] == nq && bias->n_parts == 3 &&
            !strcmp(bias->name, nm) && bias->kind == PZ_T_WEIGHT);
    } else {
      CHECK(!bias);
    }
    CHECK(is2(T(g, q->dst[0]), m, nq) && q->dst[0] == a->src[PZ_GQA_QKV] && T(g, q->dst[0])->dtype == PZ_F32);
    /* GQA_ATTN: params, norms, o_proj, caches */
    const pz_gqa_params *p = &a->p.gqa;
    CHECK(a->n_src == PZ_GQA_NSRC && p->n_heads == heads && p->n_kv_heads == kvh && p->head_dim == d && p->hidden == H &&
          p->max_ctx == ctx && p->eps == c->rms_norm_eps && p->softmax_scale == (float)(1.0 / sqrt((double)d)) &&
          p->rope.type == c->rope.type &&
          p->rope.theta == c->rope.theta && p->prezero_n_total == 0);
    CHECK((a->src[PZ_GQA_Q_NORM_W] >= 0) == c->qk_norm && (a->src[PZ_GQA_K_NORM_W] >= 0) == c->qk_norm);
    if (c->qk_norm) {
      snprintf(nm, sizeof nm, "layers.%d.self_attn.q_norm.weight", l);
      CHECK(named(T(g, a->src[PZ_GQA_Q_NORM_W]), nm, d));
      snprintf(nm, sizeof nm, "layers.%d.self_attn.k_norm.weight", l);
      CHECK(named(T(g, a->src[PZ_GQA_K_NORM_W]), nm, d));
    }
    const pz_tensor *ow = T(g, a->src[PZ_GQA_O_W]);
    CHECK(is2(ow, H, heads * d) && ow->shard_dim == 1 && ow->full_ne[1] == NH * d && ow->n_parts == 0);
    for (int k = 0; k < 2; k++) {
      const pz_tensor *kc = T(g, a->src[k ? PZ_GQA_V_CACHE : PZ_GQA_K_CACHE]);
      snprintf(nm, sizeof nm, "layers.%d.self_attn.%s", l, k ? "v_cache" : "k_cache");
      CHECK(kc && !strcmp(kc->name, nm) && kc->kind == PZ_T_STATE && kc->dtype == PZ_BF16 && kc->batched &&
            kc->ndim == 4 && kc->ne[0] == m && kc->ne[1] == kvh && kc->ne[2] == ctx && kc->ne[3] == d &&
            kc->shard_dim == 1 && kc->full_ne[1] == NKV);
    }
    CHECK(a->src[PZ_GQA_POS] == g->in_pos && a->src[PZ_GQA_OPROJ_PREZERO] == -1);
    CHECK(is2(T(g, a->dst[0]), m, H) && n2->src[0] == a->dst[0]);
    /* MLP */
    if (layer_moe(c, l)) {
      snprintf(nm, sizeof nm, "layers.%d.mlp", l);
      const pz_node *e = find(g, nm);
      CHECK(e && e->op == PZ_OP_MOE && e->src[PZ_MOE_X] == n2->dst[0]);
      if (!e) continue;
      CHECK(e->p.moe.n_experts == c->n_routed_experts && e->p.moe.top_k == c->num_experts_per_tok &&
            e->p.moe.scoring == c->scoring_func && e->p.moe.inter == MI && e->p.moe.shared_inter == 0 &&
            e->p.moe.norm_topk_prob == c->norm_topk_prob && e->src[PZ_MOE_SH_GATE] == -1 && e->src[PZ_MOE_BIAS] == -1);
      const pz_tensor *eg = T(g, e->src[PZ_MOE_W_GATE]), *ed = T(g, e->src[PZ_MOE_W_DOWN]);
      CHECK(eg->ndim == 3 && eg->ne[0] == c->n_routed_experts && eg->ne[1] == MI && eg->ne[2] == H);
      CHECK(ed->ndim == 3 && ed->ne[1] == H && ed->ne[2] == MI);
      CHECK(is2(T(g, e->src[PZ_MOE_LOGITS]), m, c->n_routed_experts));
    } else {
      snprintf(nm, sizeof nm, "layers.%d.mlp.gate_up_proj", l);
      const pz_node *gu = find(g, nm);
      snprintf(nm, sizeof nm, "layers.%d.mlp.act_fn", l);
      const pz_node *act = find(g, nm);
      snprintf(nm, sizeof nm, "layers.%d.mlp.down_proj", l);
      const pz_node *dn = find(g, nm);
      CHECK(gu && act && dn);
      if (!gu || !act || !dn) continue;
      const pz_tensor *wg = T(g, gu->src[1]);
      CHECK(gu->src[0] == n2->dst[0] && is2(wg, 2 * I, H) && wg->n_parts == 2 && wg->part_ne[0] == I &&
            wg->part_ne[1] == I && wg->part_full[0] == c->intermediate_size && wg->full_ne[0] == 2 * c->intermediate_size);
      CHECK(gu->src[2] == -1 && act->src[0] == gu->dst[0] && act->p.mlp.inter == I);
      snprintf(nm, sizeof nm, "layers.%d.mlp.act_fn.out", l);
      CHECK(is2(T(g, act->dst[0]), m, I) && T(g, act->dst[0])->dtype == PZ_BF16 && !strcmp(T(g, act->dst[0])->name, nm));
      CHECK(dn->src[0] == act->dst[0] && is2(T(g, dn->src[1]), H, I) && T(g, dn->src[1])->shard_dim == 1 &&
            is2(T(g, dn->dst[0]), m, H));
    }
  }
  const pz_node *lm = find(g, "lm_head"), *emb = find(g, "embed_tokens");
  CHECK(lm && emb && is2(T(g, lm->src[1]), V, H));
  if (lm && emb) CHECK((lm->src[1] == emb->src[1]) == c->tie_word_embeddings);
  CHECK((pz_graph_find_tensor(g, "lm_head.weight") == NULL) == c->tie_word_embeddings);
  CHECK_OK(pz_graph_verify(g));
  pz_graph_free(g);
  free(want_op);
  free(want_role);
}

/* Full (unsharded) parameter count of the graph's weights (parts included in full_ne). */
static double full_params(const pz_graph *g) {
  double n = 0;
  for (int i = 0; i < g->n_tensors; i++) {
    const pz_tensor *t = &g->tensors[i];
    if (t->kind != PZ_T_WEIGHT) continue;
    double p = 1;
    for (int d = 0; d < t->ndim; d++) p *= (double)t->full_ne[d];
    n += p;
  }
  return n;
}

/* The presets: structure at every TP in 1..8 the builder accepts, and the full parameter count
 * at each TP equal to the published one (safetensors totals of the Hugging Face checkpoints:
 * exact; the Qwen3 model cards' rounded figures: within their last digit). */
static void test_presets(void) {
  static const struct { const char *name; double params, rel; } P[] = {
      {"tiny_llama", 0, 0},
      {"tiny_qwen3_moe", 0, 0},
      {"llama3_1_8b", 8030261248.0, 0},
      {"llama3_1_70b", 70553706496.0, 0},
      {"qwen2_5_72b", 72706203648.0, 0},
      {"mixtral_8x7b", 46702792704.0, 0},
      {"qwen3_32b", 32.8e9, 0.0016},
      {"qwen3_30b_a3b", 30.5e9, 0.0017},
      {"qwen3_235b_a22b", 235e9, 0.0022},
  };
  for (size_t k = 0; k < sizeof P / sizeof P[0]; k++) {
    pz_model_config c;
    CHECK_OK(pz_config_load(P[k].name, &c));
    CHECK(c.attn == PZ_ATTN_GQA);
    for (int tp = 1; tp <= 8; tp *= 2) {
      if (c.num_attention_heads % tp) { refused(&c, tp, "num_attention_heads"); continue; }
      check_structure(&c, tp);
      if (P[k].params <= 0) continue;
      pz_graph *g = build(&c, tp, 1, 64);
      if (!g) continue;
      double n = full_params(g);
      if (P[k].rel == 0 ? n != P[k].params : fabs(n / P[k].params - 1) > P[k].rel) fprintf(stderr, "%s tp %d: %.0f parameters\n", P[k].name, tp, n);
      CHECK(P[k].rel == 0 ? n == P[k].params : fabs(n / P[k].params - 1) <= P[k].rel);
      pz_graph_free(g);
    }
  }
}

/* One refusal: PZ_ERR_INVALID_ARG, one line naming `field`. */
static void refused(const pz_model_config *c, int tp, const char *field) {
  pz_build_opts o = PZ_BUILD_OPTS_INIT;
  o.tp = tp;
  o.max_ctx = 16;
  pz_graph *g = NULL;
  CHECK_ST(pz_build_decode_graph(c, &o, &g), PZ_ERR_INVALID_ARG);
  CHECK(g == NULL && strstr(pz_last_error(), field) && !strchr(pz_last_error(), '\n'));
  if (!strstr(pz_last_error(), field)) fprintf(stderr, "  want '%s' in: %s\n", field, pz_last_error());
}

static void test_refusals(void) {
  pz_model_config c = dense_cfg();
  refused(&c, 3, "num_attention_heads");
  c.num_attention_heads = 12;
  c.num_key_value_heads = 4;
  c.hidden_size = 96;
  c.intermediate_size = 192;
  c.vocab_size = 384;
  refused(&c, 6, "num_key_value_heads"); /* 6 neither divides 4 nor is a multiple of it */
  c = dense_cfg();
  c.intermediate_size = 100;
  refused(&c, 8, "intermediate_size");
  c = moe_cfg();
  c.moe_intermediate_size = 36;
  refused(&c, 8, "moe_intermediate_size");
  c = dense_cfg();
  c.vocab_size = 250;
  refused(&c, 4, "vocab_size");
  c = dense_cfg();
  c.num_key_value_heads = 3;
  refused(&c, 1, "num_key_value_heads");
  c = dense_cfg();
  c.head_dim = 15;
  refused(&c, 1, "head_dim");
  /* every TP from 1 to 8 that divides the heads builds (2 kv heads: 4 and 8 replicate them) */
  c = dense_cfg();
  for (int tp = 1; tp <= 8; tp++) {
    pz_build_opts o = PZ_BUILD_OPTS_INIT;
    o.tp = tp;
    o.max_ctx = 64;
    pz_graph *g = NULL;
    pz_status st = pz_build_decode_graph(&c, &o, &g);
    CHECK((st == PZ_OK) == (8 % tp == 0));
    pz_graph_free(g);
  }
}

/* ------------------------------------------------------------------ seeded fill across TP */

static pz_cpu_exec *make_exec(const pz_graph *g) {
  pz_cpu_exec_opts o = PZ_CPU_EXEC_OPTS_INIT;
  o.seed = 11;
  o.threads = 2;
  o.poison = 1;
  pz_cpu_exec *e = NULL;
  CHECK_OK(pz_cpu_exec_create(g, &o, &e));
  return e;
}

static const void *tdata(const pz_cpu_exec *e, const pz_graph *g, int rank, const char *name) {
  const pz_tensor *t = pz_graph_find_tensor(g, name);
  return t ? pz_cpu_exec_data(e, rank, t->id) : NULL;
}

/* Global kv head of rank r's kv head j at TP tp. */
static int64_t kv_global(const pz_model_config *c, int tp, int r, int64_t j) {
  const int64_t nkv = c->num_key_value_heads;
  return nkv >= tp ? r * (nkv / tp) + j : r / (tp / nkv);
}

static void check_fill_across_tp(const pz_model_config *c, int tp) {
  const int64_t H = c->hidden_size, d = c->head_dim, NH = c->num_attention_heads, NKV = c->num_key_value_heads;
  const int64_t heads = NH / tp, kvh = NKV >= tp ? NKV / tp : 1, I = c->intermediate_size;
  pz_graph *g1 = build(c, 1, BATCH, CTX), *gt = build(c, tp, BATCH, CTX);
  pz_cpu_exec *e1 = g1 ? make_exec(g1) : NULL, *et = gt ? make_exec(gt) : NULL;
  if (!e1 || !et) goto done;
  int bad = 0;
  for (int r = 0; r < tp; r++) {
    const pz_bf16 *w1 = tdata(e1, g1, 0, "layers.0.self_attn.qkv_proj.weight");
    const pz_bf16 *wt = tdata(et, gt, r, "layers.0.self_attn.qkv_proj.weight");
    const float *b1 = tdata(e1, g1, 0, "layers.0.self_attn.qkv_proj.bias"), *bt = tdata(et, gt, r, "layers.0.self_attn.qkv_proj.bias");
    for (int64_t j = 0; j < (heads + 2 * kvh) * d; j++) {
      int64_t row; /* the TP 1 row of this rank's row j: q | k | v of the global heads */
      if (j < heads * d) row = r * heads * d + j;
      else if (j < (heads + kvh) * d) row = NH * d + kv_global(c, tp, r, (j - heads * d) / d) * d + (j - heads * d) % d;
      else row = (NH + NKV) * d + kv_global(c, tp, r, (j - (heads + kvh) * d) / d) * d + (j - (heads + kvh) * d) % d;
      bad += memcmp(wt + j * H, w1 + row * H, sizeof(pz_bf16) * (size_t)H) != 0;
      if (b1 && bt) bad += memcmp(&bt[j], &b1[row], sizeof(float)) != 0;
    }
    CHECK(!c->attention_bias || (b1 && bt));
    /* o_proj: columns r*heads*d.. (the plain row-parallel shard) */
    const pz_bf16 *o1 = tdata(e1, g1, 0, "layers.0.self_attn.o_proj.weight"), *ot = tdata(et, gt, r, "layers.0.self_attn.o_proj.weight");
    for (int64_t n = 0; n < H; n++)
      bad += memcmp(ot + n * heads * d, o1 + n * NH * d + r * heads * d, sizeof(pz_bf16) * (size_t)(heads * d)) != 0;
    /* caches: (i, g, t) of rank r = (i, global g, t) of TP 1 */
    for (int k = 0; k < 2; k++) {
      const char *cn = k ? "layers.0.self_attn.v_cache" : "layers.0.self_attn.k_cache";
      const pz_bf16 *c1 = tdata(e1, g1, 0, cn), *ct = tdata(et, gt, r, cn);
      for (int64_t i = 0; i < BATCH; i++)
        for (int64_t j = 0; j < kvh; j++)
          bad += memcmp(ct + (i * kvh + j) * CTX * d, c1 + (i * NKV + kv_global(c, tp, r, j)) * CTX * d,
                        sizeof(pz_bf16) * (size_t)(CTX * d)) != 0;
    }
    /* gate_up_proj: this rank's gate rows, then its up rows */
    const pz_bf16 *g1w = tdata(e1, g1, 0, "layers.0.mlp.gate_up_proj.weight"), *gtw = tdata(et, gt, r, "layers.0.mlp.gate_up_proj.weight");
    if (g1w && gtw)
      for (int64_t j = 0; j < 2 * I / tp; j++) {
        int64_t row = j < I / tp ? r * (I / tp) + j : I + r * (I / tp) + (j - I / tp);
        bad += memcmp(gtw + j * H, g1w + row * H, sizeof(pz_bf16) * (size_t)H) != 0;
      }
  }
  CHECK(bad == 0);
  /* the cache holds the seeded values, not zeros */
  const pz_bf16 *kc = tdata(e1, g1, 0, "layers.0.self_attn.k_cache");
  int nonzero = 0;
  for (int64_t x = 0; x < BATCH * NKV * CTX * d; x++) nonzero += (kc[x] & 0x7fff) != 0;
  CHECK(nonzero > BATCH * NKV * CTX * d * 9 / 10);
done:
  pz_cpu_exec_free(e1);
  pz_cpu_exec_free(et);
  pz_graph_free(g1);
  pz_graph_free(gt);
}

/* ------------------------------------------------------------------ decode */

static const int32_t pos0[BATCH] = {5, 0, 17};

static void first_tokens(int32_t *t, int64_t vocab) {
  for (int i = 0; i < BATCH; i++) t[i] = (int32_t)((i * 97 + 13) % vocab);
}

/* The first step at TP 1 recomputed with the reference ops from the executor's weights and
 * caches as they were before the step; must equal the executor's logits bit for bit. */
static void check_recompute(const pz_model_config *c) {
  const int64_t H = c->hidden_size, d = c->head_dim, NH = c->num_attention_heads, NKV = c->num_key_value_heads;
  const int64_t V = c->vocab_size, I = c->intermediate_size, nq = (NH + 2 * NKV) * d, E = c->n_routed_experts;
  const int L = (int)c->num_hidden_layers;
  const float eps = c->rms_norm_eps;
  pz_graph *g = build(c, 1, BATCH, CTX);
  pz_cpu_exec *e = g ? make_exec(g) : NULL;
  if (!e) { pz_graph_free(g); return; }
  /* caches before the step */
  const size_t csz = (size_t)BATCH * NKV * CTX * d;
  pz_bf16 *kc = malloc(sizeof(pz_bf16) * csz * L), *vc = malloc(sizeof(pz_bf16) * csz * L);
  char nm[PZ_NAME_LEN];
  for (int l = 0; l < L; l++) {
    snprintf(nm, sizeof nm, "layers.%d.self_attn.k_cache", l);
    memcpy(kc + l * csz, tdata(e, g, 0, nm), sizeof(pz_bf16) * csz);
    snprintf(nm, sizeof nm, "layers.%d.self_attn.v_cache", l);
    memcpy(vc + l * csz, tdata(e, g, 0, nm), sizeof(pz_bf16) * csz);
  }
  int32_t tok[BATCH], next[BATCH];
  first_tokens(tok, V);
  CHECK_OK(pz_cpu_exec_step(e, BATCH, tok, pos0, next));
  float *got = malloc(sizeof(float) * BATCH * V);
  CHECK_OK(pz_cpu_exec_logits(e, BATCH, got));

  float *part = malloc(sizeof(float) * BATCH * H), *res = malloc(sizeof(float) * BATCH * H);
  float *qkv = malloc(sizeof(float) * BATCH * nq), *gu = malloc(sizeof(float) * BATCH * 2 * I);
  float *lg = malloc(sizeof(float) * BATCH * (E > 0 ? E : 1)), *logits = malloc(sizeof(float) * BATCH * V);
  pz_bf16 *xn = malloc(sizeof(pz_bf16) * BATCH * H), *act = malloc(sizeof(pz_bf16) * BATCH * I);
  const pz_bf16 *emb = tdata(e, g, 0, "embed_tokens.weight");
  CHECK_OK(pz_ref_embedding(BATCH, tok, emb, H, V, V, 0, part, H));
  for (int l = 0; l < L; l++) {
#define W(fmtname) (snprintf(nm, sizeof nm, fmtname, l), tdata(e, g, 0, nm))
    const float *pp = part;
    pz_ref_ar_rmsnorm(1, &pp, H, l ? res : NULL, res, H, W("layers.%d.input_layernorm.weight"), eps, BATCH, H, xn, H);
    pz_ref_gemm(BATCH, nq, H, xn, H, W("layers.%d.self_attn.qkv_proj.weight"), H,
                c->attention_bias ? W("layers.%d.self_attn.qkv_proj.bias") : NULL, qkv, nq, 0, true);
    pz_gqa_params p = {.n_heads = (int)NH, .n_kv_heads = (int)NKV, .head_dim = d, .hidden = H, .max_ctx = CTX, .eps = eps,
                       .softmax_scale = (float)(1.0 / sqrt((double)d)), .rope = c->rope};
    pz_ref_gqa_io io = {.qkv = qkv, .ld_qkv = nq, .o_w = W("layers.%d.self_attn.o_proj.weight"), .k_cache = kc + l * csz,
                        .v_cache = vc + l * csz, .cache_seq_stride = NKV * CTX * d, .cache_head_stride = CTX * d,
                        .pos = pos0, .out = part, .ld_out = H, .out_zero_init = true};
    if (c->qk_norm) {
      io.q_norm_w = W("layers.%d.self_attn.q_norm.weight");
      io.k_norm_w = W("layers.%d.self_attn.k_norm.weight");
    }
    CHECK_OK(pz_ref_gqa_attention(BATCH, &p, &io));
    pp = part;
    pz_ref_ar_rmsnorm(1, &pp, H, res, res, H, W("layers.%d.post_attention_layernorm.weight"), eps, BATCH, H, xn, H);
    if (layer_moe(c, l)) {
      pz_ref_gemm(BATCH, E, H, xn, H, W("layers.%d.mlp.gate.weight"), H, NULL, lg, E, 0, true);
      pz_moe_params mp = {.n_experts = (int)E, .top_k = (int)c->num_experts_per_tok, .n_group = 1, .topk_group = 1,
                          .scoring = c->scoring_func, .topk_method = PZ_TOPK_GREEDY, .norm_topk_prob = c->norm_topk_prob,
                          .routed_scaling_factor = 1.f, .inter = c->moe_intermediate_size};
      CHECK_OK(pz_ref_moe(BATCH, H, xn, H, lg, E, NULL, &mp, W("layers.%d.mlp.experts.gate_proj.weight"),
                          W("layers.%d.mlp.experts.up_proj.weight"), W("layers.%d.mlp.experts.down_proj.weight"), NULL, NULL,
                          NULL, part, H, NULL, NULL));
    } else {
      pz_ref_gemm(BATCH, 2 * I, H, xn, H, W("layers.%d.mlp.gate_up_proj.weight"), H, NULL, gu, 2 * I, 0, true);
      pz_ref_silu_mul(BATCH, I, gu, 2 * I, act, I);
      pz_ref_gemm(BATCH, H, I, act, I, W("layers.%d.mlp.down_proj.weight"), I, NULL, part, H, 0, true);
    }
#undef W
  }
  const float *pp = part;
  pz_ref_ar_rmsnorm(1, &pp, H, res, res, H, tdata(e, g, 0, "norm.weight"), eps, BATCH, H, xn, H);
  pz_ref_gemm(BATCH, V, H, xn, H, c->tie_word_embeddings ? emb : tdata(e, g, 0, "lm_head.weight"), H, NULL, logits, V, 0,
              true);
  CHECK(memcmp(logits, got, sizeof(float) * BATCH * V) == 0);
  /* the step appended this step's k / v: the executor's caches equal the recomputation's */
  for (int l = 0; l < L; l++) {
    snprintf(nm, sizeof nm, "layers.%d.self_attn.k_cache", l);
    CHECK(memcmp(kc + l * csz, tdata(e, g, 0, nm), sizeof(pz_bf16) * csz) == 0);
    snprintf(nm, sizeof nm, "layers.%d.self_attn.v_cache", l);
    CHECK(memcmp(vc + l * csz, tdata(e, g, 0, nm), sizeof(pz_bf16) * csz) == 0);
  }
  free(kc); free(vc); free(got); free(part); free(res); free(qkv); free(gu); free(lg); free(logits); free(xn); free(act);
  pz_cpu_exec_free(e);
  pz_graph_free(g);
}

/* STEPS steps at TP tp: teacher-forced by tok (tok[s+1] = TP 1's greedy output) when forced,
 * else free-running from tok[0]; logits of every step into lg, greedy tokens into out. */
static int decode(const pz_model_config *c, int tp, int32_t tok[][BATCH], int forced, float *lg, int32_t out[][BATCH]) {
  pz_graph *g = build(c, tp, BATCH, CTX);
  pz_cpu_exec *e = g ? make_exec(g) : NULL;
  if (!e) { pz_graph_free(g); return 0; }
  const int64_t V = c->vocab_size;
  int32_t pos[BATCH], cur[BATCH];
  memcpy(pos, pos0, sizeof pos);
  memcpy(cur, tok[0], sizeof cur);
  for (int s = 0; s < STEPS; s++) {
    CHECK_OK(pz_cpu_exec_step(e, BATCH, forced ? tok[s] : cur, pos, out[s]));
    CHECK_OK(pz_cpu_exec_logits(e, BATCH, lg + (size_t)s * BATCH * V));
    memcpy(cur, out[s], sizeof cur);
    for (int i = 0; i < BATCH; i++) pos[i]++;
  }
  pz_cpu_exec_free(e);
  pz_graph_free(g);
  return 1;
}

static void check_tp_decode(const pz_model_config *c, int max_tp) {
  const int64_t V = c->vocab_size;
  const size_t nl = (size_t)STEPS * BATCH * V;
  float *l1 = malloc(nl * 4), *lt = malloc(nl * 4);
  int32_t tok[STEPS + 1][BATCH], out[STEPS][BATCH];
  first_tokens(tok[0], V);
  if (!decode(c, 1, tok, 0, l1, out)) goto done;
  memcpy(tok[1], out, sizeof out);
  double spread = 0;
  for (size_t j = 0; j < nl; j++) spread = fmax(spread, fabs(l1[j]));
  CHECK(spread > 0.1 && spread < 50);
  for (int tp = 2; tp <= max_tp; tp *= 2) {
    if (!decode(c, tp, tok, 1, lt, out)) continue;
    double maxd = 0;
    int clear = 0, agree = 0;
    for (int s = 0; s < STEPS; s++)
      for (int i = 0; i < BATCH; i++) {
        const float *a = l1 + ((size_t)s * BATCH + i) * V, *b = lt + ((size_t)s * BATCH + i) * V;
        float top = -INFINITY, second = -INFINITY;
        for (int64_t j = 0; j < V; j++) {
          double dd = fabs((double)a[j] - b[j]);
          if (!(dd <= maxd)) maxd = dd;
          if (a[j] > top) { second = top; top = a[j]; } else if (a[j] > second) second = a[j];
        }
        if (top - second > 2 * LOGIT_TOL) { clear++; agree += out[s][i] == tok[s + 1][i]; }
      }
    printf("%s tp %d vs tp 1: max |logit diff| %.3g over %d steps x %d rows; argmax agrees on %d/%d clear rows\n", c->name,
           tp, maxd, STEPS, BATCH, agree, clear);
    CHECK(maxd <= LOGIT_TOL);
    CHECK(agree == clear && clear >= STEPS * BATCH / 2);
    /* free-running greedy: the same tokens as TP 1 */
    int32_t free_out[STEPS][BATCH];
    if (decode(c, tp, tok, 0, lt, free_out)) CHECK(memcmp(free_out, &tok[1], sizeof free_out) == 0);
  }
done:
  free(l1);
  free(lt);
}

int main(void) {
  const pz_model_config cs[3] = {dense_cfg(), moe_cfg(), mixtral_cfg()};
  for (int k = 0; k < 3; k++)
    for (int tp = 1; tp <= 8; tp *= 2) check_structure(&cs[k], tp);
  test_refusals();
  test_presets();
  for (int k = 0; k < 3; k++)
    for (int tp = 2; tp <= 8; tp *= 2) check_fill_across_tp(&cs[k], tp);
  for (int k = 0; k < 3; k++) check_recompute(&cs[k]);
  for (int k = 0; k < 3; k++) check_tp_decode(&cs[k], 8);
  /* the tiny presets (4 heads: TP up to 4) */
  static const char *const tiny[] = {"tiny_llama", "tiny_qwen3_moe"};
  for (int k = 0; k < 2; k++) {
    pz_model_config c;
    CHECK_OK(pz_config_load(tiny[k], &c));
    check_recompute(&c);
    check_tp_decode(&c, 4);
  }
  TEST_DONE();
}
