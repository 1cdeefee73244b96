/* Decode-graph builder: per-rank shapes of every preset at TP 1/2/4/8 checked against the
 * config arithmetic (docs/ARCHITECTURE.md §2), layer/role tagging, dense vs MoE layers, total parameter
 * counts against the published model sizes, and the builder's argument errors. */
#include "model/builder.h"
#include "pz_test.h"
#include <string.h>

static const pz_node *find(const pz_graph *g, const char *name) {
  for (int i = 0; i < g->n_nodes; i++)
    if (!strcmp(g->nodes[i].name, name)) return &g->nodes[i];
  return NULL;
}
static const pz_tensor *T(const pz_graph *g, int id) { return id >= 0 ? &g->tensors[id] : NULL; }
static int is2(const pz_tensor *t, int64_t a, int64_t b) { return t && t->ndim == 2 && t->ne[0] == a && t->ne[1] == b; }
static int is3(const pz_tensor *t, int64_t a, int64_t b, int64_t c) {
  return t && t->ndim == 3 && t->ne[0] == a && t->ne[1] == b && t->ne[2] == c;
}

/* Full (unsharded) parameter count of the graph's weights. */
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

static void check_graph(const pz_model_config *c, const pz_graph *g, int tp, int64_t m, int64_t ctx) {
  char nm[PZ_NAME_LEN];
  const int64_t H = c->hidden_size, heads = c->num_attention_heads / tp;
  const int64_t qh = c->qk_nope_head_dim + c->qk_rope_head_dim, kvw = c->kv_lora_rank + c->qk_rope_head_dim;
  const int L = g->info.n_layers;
  CHECK(g->info.tp == tp && g->info.m == m && g->info.hidden == H);
  CHECK(g->in_tokens >= 0 && g->in_pos >= 0 && g->out_tokens >= 0 && g->out_logits >= 0);
  CHECK(T(g, g->in_tokens)->dtype == PZ_I32 && T(g, g->in_tokens)->kind == PZ_T_INPUT);
  CHECK(is2(T(g, g->out_logits), m, c->vocab_size / tp));
  int n_norm = 0, n_gate = 0, n_dense = 0, n_moe = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const pz_node *n = &g->nodes[i];
    n_norm += n->op == PZ_OP_AR_RMSNORM;
    n_gate += n->role == PZ_ROLE_ROUTER_GATE;
    n_dense += n->op == PZ_OP_DENSE_MLP;
    n_moe += n->op == PZ_OP_MOE;
    if (n->layer >= 0) { /* name = layers.<layer>.<role suffix> */
      snprintf(nm, sizeof nm, "layers.%d.%s", n->layer, pz_role_suffix(n->role));
      if (strcmp(nm, n->name)) { fprintf(stderr, "node %s tagged as %s\n", n->name, nm); pz_test_failures++; }
    }
  }
  CHECK(n_norm == 2 * L + 1);
  int64_t want_dense = c->first_k_dense_replace < L ? c->first_k_dense_replace : L;
  CHECK(n_dense == want_dense && n_moe == L - want_dense && n_gate == n_moe);

  for (int l = 0; l < L; l++) {
    snprintf(nm, sizeof nm, "layers.%d.input_layernorm", l);
    const pz_node *n1 = find(g, nm);
    CHECK(n1 && n1->op == PZ_OP_AR_RMSNORM && n1->role == PZ_ROLE_INPUT_LAYERNORM && n1->layer == l);
    if (!n1) continue;
    CHECK(n1->p.norm.has_residual == (l > 0) && (l > 0 || n1->src[2] == -1));
    CHECK(is2(T(g, n1->dst[0]), m, H) && T(g, n1->dst[0])->dtype == PZ_BF16);
    CHECK(T(g, n1->dst[1])->kind == PZ_T_STATE && T(g, n1->dst[1])->dtype == PZ_F32);
    if (l == 0) CHECK(!strcmp(T(g, n1->src[0])->name, "embed_tokens.out"));

    snprintf(nm, sizeof nm, "layers.%d.self_attn", l);
    const pz_node *a = find(g, nm);
    CHECK(a && a->op == PZ_OP_MLA_ATTN && a->role == PZ_ROLE_ATTN);
    if (!a) continue;
    CHECK(a->p.mla.n_heads == heads && a->p.mla.max_ctx == ctx);
    snprintf(nm, sizeof nm, "layers.%d.self_attn.qkv_a", l);
    const pz_node *qkv = find(g, nm);
    if (c->q_lora_rank > 0) {
      CHECK(qkv && qkv->op == PZ_OP_GEMM && qkv->role == PZ_ROLE_QKV_A && qkv->p.gemm.zero_init);
      if (qkv) {
        CHECK(is2(T(g, qkv->src[0]), m, H) && qkv->src[0] == n1->dst[0]);
        CHECK(is2(T(g, qkv->src[1]), c->q_lora_rank + kvw, H) && T(g, qkv->src[1])->shard_dim == -1);
        CHECK(is2(T(g, qkv->dst[0]), m, c->q_lora_rank + kvw) && qkv->dst[0] == a->src[PZ_MLA_QKV_A]);
      }
      const pz_tensor *qb = T(g, a->src[PZ_MLA_QB_W]);
      CHECK(is2(qb, heads * qh, c->q_lora_rank) && qb->shard_dim == 0 && qb->full_ne[0] == c->num_attention_heads * qh);
      CHECK(a->src[PZ_MLA_Q] == -1 && a->src[PZ_MLA_KV_A] == -1);
    } else {
      CHECK(qkv == NULL && a->src[PZ_MLA_QKV_A] == -1 && a->src[PZ_MLA_QB_W] == -1);
      snprintf(nm, sizeof nm, "layers.%d.self_attn.q_proj", l);
      const pz_node *q = find(g, nm);
      snprintf(nm, sizeof nm, "layers.%d.self_attn.kv_a_proj_with_mqa", l);
      const pz_node *kv = find(g, nm);
      CHECK(q && q->op == PZ_OP_GEMM && q->role == PZ_ROLE_Q_PROJ);
      CHECK(kv && kv->op == PZ_OP_GEMM && kv->role == PZ_ROLE_KV_A);
      if (q && kv) {
        CHECK(is2(T(g, q->src[1]), heads * qh, H) && T(g, q->src[1])->shard_dim == 0);
        CHECK(is2(T(g, kv->src[1]), kvw, H) && T(g, kv->src[1])->shard_dim == -1);
        CHECK(q->dst[0] == a->src[PZ_MLA_Q] && kv->dst[0] == a->src[PZ_MLA_KV_A]);
      }
    }
    CHECK(is3(T(g, a->src[PZ_MLA_W_UK]), heads, c->qk_nope_head_dim, c->kv_lora_rank));
    CHECK(is3(T(g, a->src[PZ_MLA_W_UV]), heads, c->v_head_dim, c->kv_lora_rank));
    const pz_tensor *o = T(g, a->src[PZ_MLA_O_W]);
    CHECK(is2(o, H, heads * c->v_head_dim) && o->shard_dim == 1 && o->full_ne[1] == c->num_attention_heads * c->v_head_dim);
    const pz_tensor *kc = T(g, a->src[PZ_MLA_KV_CACHE]);
    const int64_t mb = (ctx + PZ_KV_BLOCK - 1) / PZ_KV_BLOCK; /* paged: pool [m * max_blocks, 64, kvw] + block table */
    CHECK(is3(kc, m * mb, PZ_KV_BLOCK, kvw) && kc->kind == PZ_T_STATE && kc->dtype == PZ_BF16);
    const pz_tensor *bt = a->src[PZ_MLA_BLOCK_TABLE] >= 0 ? T(g, a->src[PZ_MLA_BLOCK_TABLE]) : NULL;
    CHECK(bt && is2(bt, m, mb) && bt->dtype == PZ_I32 && bt->kind == PZ_T_STATE && !strcmp(bt->name, "block_table"));
    CHECK(kc && strlen(kc->name) > 8 && !strcmp(kc->name + strlen(kc->name) - 8, "kv_cache"));
    CHECK(a->src[PZ_MLA_POS] == g->in_pos);
    CHECK(a->src[PZ_MLA_QB_PREZERO] == -1 && a->src[PZ_MLA_OPROJ_PREZERO] == -1);
    CHECK(is2(T(g, a->dst[0]), m, H));

    snprintf(nm, sizeof nm, "layers.%d.post_attention_layernorm", l);
    const pz_node *n2 = find(g, nm);
    CHECK(n2 && n2->role == PZ_ROLE_POST_ATTN_LAYERNORM && n2->src[0] == a->dst[0] && n2->p.norm.has_residual);
    if (!n2) continue;
    snprintf(nm, sizeof nm, "layers.%d.mlp.gate", l);
    const pz_node *gate = find(g, nm);
    snprintf(nm, sizeof nm, "layers.%d.mlp", l);
    const pz_node *mlp = find(g, nm);
    CHECK(mlp != NULL);
    if (!mlp) continue;
    if (pz_config_layer_is_moe(c, l)) {
      CHECK(l >= c->first_k_dense_replace && mlp->op == PZ_OP_MOE && gate && gate->op == PZ_OP_GEMM);
      if (!gate) continue;
      CHECK(gate->src[0] == n2->dst[0] && is2(T(g, gate->src[1]), c->n_routed_experts, H));
      CHECK(T(g, gate->src[1])->shard_dim == -1);
      CHECK(is2(T(g, gate->dst[0]), m, c->n_routed_experts) && mlp->src[PZ_MOE_LOGITS] == gate->dst[0]);
      CHECK(mlp->p.moe.inter == c->moe_intermediate_size / tp && mlp->p.moe.top_k == c->num_experts_per_tok);
      CHECK(mlp->p.moe.shared_inter == c->n_shared_experts * c->moe_intermediate_size / tp);
      CHECK(is3(T(g, mlp->src[PZ_MOE_W_DOWN]), c->n_routed_experts, H, c->moe_intermediate_size / tp));
      CHECK((mlp->src[PZ_MOE_BIAS] >= 0) == (c->topk_method == PZ_TOPK_NOAUX_TC));
    } else {
      CHECK(l < c->first_k_dense_replace && mlp->op == PZ_OP_DENSE_MLP && gate == NULL);
      CHECK(is2(T(g, mlp->src[1]), c->intermediate_size / tp, H) && mlp->p.mlp.inter == c->intermediate_size / tp);
    }
  }
  const pz_node *lm = find(g, "lm_head"), *fn = find(g, "norm"), *am = find(g, "argmax");
  CHECK(lm && fn && am && lm->src[0] == fn->dst[0] && am->src[0] == lm->dst[0] && am->dst[0] == g->out_tokens);
  if (lm) CHECK(is2(T(g, lm->src[1]), c->vocab_size / tp, H) && T(g, lm->src[1])->full_ne[0] == c->vocab_size);
}

int main(void) {
  const char *presets[] = {"tiny", "kimi_k2", "deepseek_v3", "deepseek_v2_lite"};
  for (int p = 0; p < 4; p++) {
    pz_model_config c;
    CHECK_OK(pz_config_load(presets[p], &c));
    for (int tp = 1; tp <= 8; tp *= 2) {
      for (int layers = 0; layers <= 4; layers += 4) { /* all layers, and the first 4 */
        pz_build_opts o = PZ_BUILD_OPTS_INIT;
        o.tp = tp;
        o.m = 4 + tp;
        o.max_ctx = 256;
        o.layers = layers;
        pz_graph *g = NULL;
        CHECK_OK(pz_build_decode_graph(&c, &o, &g));
        if (!g) continue;
        CHECK(g->info.n_layers == (layers ? layers : c.num_hidden_layers));
        check_graph(&c, g, tp, o.m, o.max_ctx);
        /* Whole-model parameter counts: sharded full_ne must reassemble the published sizes
         * (without MTP layers): Kimi-K2 1.03e12 ("1T total"), DeepSeek-V3 671e9, V2-Lite 15.7e9. */
        if (!layers && tp == 1) printf("%s: %.6g parameters\n", presets[p], full_params(g));
        if (!layers) {
          double n = full_params(g), want = 0;
          if (!strcmp(presets[p], "kimi_k2")) want = 1.027e12;
          if (!strcmp(presets[p], "deepseek_v3")) want = 671.0e9;
          if (!strcmp(presets[p], "deepseek_v2_lite")) want = 15.7e9;
          if (want > 0 && (n < want * 0.99 || n > want * 1.01)) {
            fprintf(stderr, "%s tp %d: %.4g parameters, want %.4g +-1%%\n", presets[p], tp, n, want);
            pz_test_failures++;
          }
        }
        pz_graph_free(g);
      }
    }
  }

  /* The figures quoted in docs/ARCHITECTURE.md §2 for Kimi-K2 at TP=4. */
  pz_model_config k;
  CHECK_OK(pz_config_load("kimi_k2", &k));
  pz_build_opts o = {.tp = 4, .m = 8, .max_ctx = 1024, .layers = 2};
  pz_graph *g = NULL;
  CHECK_OK(pz_build_decode_graph(&k, &o, &g));
  if (g) {
    const pz_node *qkv = find(g, "layers.1.self_attn.qkv_a"), *a = find(g, "layers.1.self_attn");
    const pz_node *gate = find(g, "layers.1.mlp.gate");
    CHECK(qkv && is2(T(g, qkv->src[0]), 8, 7168) && is2(T(g, qkv->dst[0]), 8, 2112));
    CHECK(a && is2(T(g, a->src[PZ_MLA_QB_W]), 3072, 1536) && is2(T(g, a->src[PZ_MLA_O_W]), 7168, 2048));
    CHECK(gate && is2(T(g, gate->src[1]), 384, 7168));
    CHECK(find(g, "layers.0.mlp.gate") == NULL && find(g, "layers.0.mlp")->op == PZ_OP_DENSE_MLP);
    pz_graph_free(g);
  }

  /* Argument errors. */
  o = (pz_build_opts){.tp = 3, .m = 1, .max_ctx = 16, .layers = 1};
  CHECK_ST(pz_build_decode_graph(&k, &o, &g), PZ_ERR_INVALID_ARG);
  CHECK(strstr(pz_last_error(), "num_attention_heads") != NULL);
  o.tp = 128; /* divides 64 heads? no */
  CHECK_ST(pz_build_decode_graph(&k, &o, &g), PZ_ERR_INVALID_ARG);
  o.tp = 1;
  o.m = 0;
  CHECK_ST(pz_build_decode_graph(&k, &o, &g), PZ_ERR_INVALID_ARG);
  o.m = PZ_MAX_BATCH + 1;
  CHECK_ST(pz_build_decode_graph(&k, &o, &g), PZ_ERR_INVALID_ARG);
  o.m = PZ_MAX_BATCH;
  CHECK_OK(pz_build_decode_graph(&k, &o, &g));
  pz_graph_free(g);
  o.max_ctx = k.max_position_embeddings + 1;
  CHECK_ST(pz_build_decode_graph(&k, &o, &g), PZ_ERR_INVALID_ARG);
  CHECK(strstr(pz_last_error(), "max_position_embeddings") != NULL);
  o.max_ctx = 16;
  o.layers = 62;
  CHECK_ST(pz_build_decode_graph(&k, &o, &g), PZ_ERR_INVALID_ARG);
  pz_model_config v2;
  CHECK_OK(pz_config_load("deepseek_v2_lite", &v2));
  o = (pz_build_opts){.tp = 16, .m = 1, .max_ctx = 16, .layers = 2};
  CHECK_OK(pz_build_decode_graph(&v2, &o, &g)); /* 16 heads, 10944 = 16*684, 1408 = 16*88 */
  pz_graph_free(g);
  o.tp = 32;
  CHECK_ST(pz_build_decode_graph(&v2, &o, &g), PZ_ERR_INVALID_ARG);
  TEST_DONE();
}
