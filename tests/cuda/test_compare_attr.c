/* pz_compare_attribute (host logic of `prezero compare`, needs no GPU): profiled graph nodes with
 * hand-set durations on the Kimi-K2 and DeepSeek-V2-Lite decode graphs (OFF and ON) sum into the
 * per-layer components computed by hand: memsets count in their GEMM, q_b / o_proj are found
 * around the MLA kernels, a quantised MoE op's shared gate | up GEMM before its silu_mul (Kimi-K2.5),
 * other ops / other devices / untagged nodes are left out. */
#include <string.h>
#include "compare/compare.h"
#include "model/builder.h"
#include "model/config.h"
#include "passes/passes.h"
#include "pz_test.h"

typedef struct { pz_profile_node v[512]; int n; uint64_t seq; } table;

static void add(table *t, int dev, int tag, const char *name, double us) {
  pz_profile_node *x = &t->v[t->n++];
  memset(x, 0, sizeof *x);
  x->graph_node_id = 1000 + (uint64_t)t->n;
  x->tag = tag;
  x->seq = ++t->seq;
  x->device = dev;
  x->kind = strcmp(name, "memset") ? 0 : 1;
  x->name = name;
  x->count = 10;
  x->median_us = x->min_us = us;
}

static pz_graph *graph(const char *model, int prezero) {
  pz_model_config mc;
  pz_graph *g = NULL;
  CHECK_OK(pz_config_load(model, &mc));
  pz_build_opts bo = PZ_BUILD_OPTS_INIT;
  bo.tp = 2;
  bo.m = 8;
  bo.max_ctx = 64;
  bo.layers = 2;
  CHECK_OK(pz_build_decode_graph(&mc, &bo, &g));
  pz_pass_opts po = PZ_PASS_OPTS_INIT;
  po.prezero = prezero;
  CHECK_OK(pz_run_passes(g, &po, NULL, NULL));
  return g;
}

/* One profile of graph g in summary order (device 0 first, then by tag and creation order).
 * Per layer L: donors 3+L (input) and 4 (post-attention); qkv_a (or q_proj + kv_a) memset 1 +
 * GEMM 10+2L; inside MLA: prep 2, [memset 1.25, GEMM 5 = q_b], absorb 1, scratch memset 0.75,
 * attention 20, combine 1, W_UV 1, memset 1.5, GEMM 9 (o_proj); router gate memset 0.5 + GEMM 7;
 * MoE / dense MLP 100; final norm 3. with_memsets = 0 drops the GEMM memsets (an ON-like
 * profile). One untagged node first, one device-1 node last. */
/* g_moe_gemms: a quantised MoE op's records as its shared experts run as GEMMs (capture order: [memset 1]
   gate | up GEMM 6, silu_mul 1, memset 0.5, down GEMM 4, then router 10, gather 4, two expert kernels 80 + 40,
   combine 5) instead of one 100 µs kernel. */
static int g_moe_gemms;

static void fill(table *t, const pz_graph *g, int with_memsets) {
  memset(t, 0, sizeof *t);
  add(t, 0, -1, "memset", 1.0);
  for (int i = 0; i < g->n_nodes; i++) {
    const pz_node *n = &g->nodes[i];
    int L = n->layer;
    switch (n->role) {
      case PZ_ROLE_INPUT_LAYERNORM: add(t, 0, n->id, "_Z17ar_rmsnorm_kernel", 3.0 + L); break;
      case PZ_ROLE_POST_ATTN_LAYERNORM: add(t, 0, n->id, "_Z17ar_rmsnorm_kernel", 4.0); break;
      case PZ_ROLE_QKV_A:
      case PZ_ROLE_Q_PROJ:
      case PZ_ROLE_KV_A:
        if (with_memsets) add(t, 0, n->id, "memset", 1.0);
        add(t, 0, n->id, "_Z18gemm_splitk_kernel", 10.0 + 2 * L);
        break;
      case PZ_ROLE_ATTN:
        add(t, 0, n->id, "_Z15mla_prep_kernel14pz_mla_kparams", 2.0);
        if (n->p.mla.q_lora_rank > 0) {
          if (with_memsets) add(t, 0, n->id, "memset", 1.25);
          add(t, 0, n->id, "_Z18gemm_splitk_kernel", 5.0);
        }
        add(t, 0, n->id, "_Z17mla_absorb_kernel14pz_mla_kparams", 1.0);
        add(t, 0, n->id, "memset", 0.75);
        add(t, 0, n->id, "_Z15mla_attn_kernelILi4ELi16EEv14pz_mla_kparams", 20.0);
        add(t, 0, n->id, "_Z18mla_combine_kernel14pz_mla_kparams", 1.0);
        add(t, 0, n->id, "_Z14mla_wuv_kernel14pz_mla_kparams", 1.0);
        if (with_memsets) add(t, 0, n->id, "memset", 1.5);
        add(t, 0, n->id, "_Z18gemm_splitk_kernel", 9.0);
        break;
      case PZ_ROLE_ROUTER_GATE:
        if (with_memsets) add(t, 0, n->id, "memset", 0.5);
        add(t, 0, n->id, "_Z18gemm_splitk_kernel", 7.0);
        break;
      case PZ_ROLE_MOE:
        if (g_moe_gemms && n->p.moe.wquant) {
          if (with_memsets) add(t, 0, n->id, "memset", 1.0);
          add(t, 0, n->id, "_ZN12_GLOBAL__N_117gemm_wgmma_kernelILi16ELi1ELi1ELi1ELi1EEEv14CUtensorMap_stS1_NS_7WParamsE", 6.0);
          add(t, 0, n->id, "_ZN12_GLOBAL__N_115silu_mul_kernelILi4EEEv18pz_silu_mul_params", 1.0);
          add(t, 0, n->id, "memset", 0.5);
          add(t, 0, n->id, "_ZN12_GLOBAL__N_117gemm_wgmma_kernelILi16ELi2ELi1ELi2ELi1EEEv14CUtensorMap_stS1_NS_7WParamsE", 4.0);
          add(t, 0, n->id, "_ZN12_GLOBAL__N_116moe_route_kernelENS_12route_paramsE", 10.0);
          add(t, 0, n->id, "_ZN12_GLOBAL__N_14moeq13gather_kernelENS0_13gather_paramsE", 4.0);
          add(t, 0, n->id, "_ZN12_GLOBAL__N_14moeq9mm_kernelINS_3W4TELb1ELi3EEEvNS0_9mm_paramsE", 80.0);
          add(t, 0, n->id, "_ZN12_GLOBAL__N_14moeq9mm_kernelINS_3W4TELb0ELi4EEEvNS0_9mm_paramsE", 40.0);
          add(t, 0, n->id, "_ZN12_GLOBAL__N_14moeq14combine_kernelENS0_14combine_paramsE", 5.0);
          break;
        }
        add(t, 0, n->id, "_Z11moe_kernel", 100.0);
        break;
      case PZ_ROLE_DENSE_MLP: add(t, 0, n->id, "_Z11moe_kernel", 100.0); break;
      case PZ_ROLE_FINAL_NORM: add(t, 0, n->id, "_Z17ar_rmsnorm_kernel", 3.0); break;
      default: add(t, 0, n->id, "_Z5other", 50.0); break;
    }
  }
  add(t, 1, 2, "_Z18gemm_splitk_kernel", 99.0);
}

static table t_off, t_on;

int main(void) {
  /* Kimi-K2, layer 0 dense, layer 1 MoE. */
  for (int pz = 0; pz < 2; pz++) {
    pz_graph *g = graph("kimi_k2", pz);
    pz_cmp_components c;
    int un = -1;
    fill(&t_off, g, 1);
    pz_compare_attribute(g, t_off.v, t_off.n, 0, &c, &un);
    CHECK(un == 1);
    CHECK_NEAR(c.us[PZ_CMP_QKV_A], 12.0, 1e-12);  /* (1+10 + 1+12) / 2 layers */
    CHECK_NEAR(c.us[PZ_CMP_Q_B], 6.25, 1e-12);    /* memset 1.25 + GEMM 5 */
    CHECK_NEAR(c.us[PZ_CMP_O_PROJ], 10.5, 1e-12); /* memset 1.5 + GEMM 9 */
    CHECK_NEAR(c.us[PZ_CMP_GATE], 7.5, 1e-12);    /* layer 1 only */
    CHECK_NEAR(c.us[PZ_CMP_DONOR], 7.5, 1e-12);   /* (3+4 + 4+4) / 2 */
    CHECK_NEAR(c.us[PZ_CMP_GEMM], 36.25, 1e-12);
    CHECK(c.nodes[PZ_CMP_QKV_A] == 4 && c.nodes[PZ_CMP_Q_B] == 4 && c.nodes[PZ_CMP_O_PROJ] == 4);
    CHECK(c.nodes[PZ_CMP_GATE] == 2 && c.nodes[PZ_CMP_DONOR] == 4);
    /* Without the memsets (what prezero ON does): GEMM times drop, signatures change. */
    pz_cmp_components d;
    fill(&t_on, g, 0);
    pz_compare_attribute(g, t_on.v, t_on.n, 0, &d, &un);
    CHECK_NEAR(d.us[PZ_CMP_QKV_A], 11.0, 1e-12);
    CHECK_NEAR(d.us[PZ_CMP_Q_B], 5.0, 1e-12);
    CHECK_NEAR(d.us[PZ_CMP_O_PROJ], 9.0, 1e-12);
    CHECK_NEAR(d.us[PZ_CMP_GATE], 7.0, 1e-12);
    CHECK_NEAR(d.us[PZ_CMP_GEMM], 32.0, 1e-12);
    CHECK_NEAR(d.us[PZ_CMP_DONOR], 7.5, 1e-12);
    for (int k = PZ_CMP_QKV_A; k <= PZ_CMP_O_PROJ; k++) CHECK(d.sig[k] != c.sig[k] && d.nodes[k] != c.nodes[k]);
    CHECK(d.sig[PZ_CMP_DONOR] == c.sig[PZ_CMP_DONOR]);
    /* Rank 1's records only: the one device-1 node (tag 2 = layer 0's qkv_a) */
    pz_compare_attribute(g, t_off.v, t_off.n, 1, &d, &un);
    CHECK_NEAR(d.us[PZ_CMP_QKV_A], 99.0, 1e-12);
    CHECK(d.us[PZ_CMP_Q_B] < 0 && d.us[PZ_CMP_DONOR] < 0 && un == 0);
    pz_graph_free(g);
  }
  /* Kimi-K2.5 (INT4 experts, layer 1 MoE): the shared experts' gate | up GEMM and its memset (what comes before the
     op's silu_mul and is none of its own kernels) are sh_gu: 1 + 6 OFF, 6 ON; the down GEMM, router, gather,
     experts and combine are not; with the fused shared experts (no silu_mul) there is no sh_gu. The MoE
     layer's time counts every record either way. */
  for (int pz = 0; pz < 2; pz++) {
    pz_graph *g = graph("kimi_k25", pz);
    pz_cmp_components c, d;
    int un = -1;
    g_moe_gemms = 1;
    fill(&t_off, g, 1);
    pz_compare_attribute(g, t_off.v, t_off.n, 0, &c, &un);
    CHECK_NEAR(c.us[PZ_CMP_SH_GU], 7.0, 1e-12);
    CHECK(c.nodes[PZ_CMP_SH_GU] == 2);
    CHECK_NEAR(c.us[PZ_CMP_GATE], 7.5, 1e-12);
    CHECK_NEAR(c.us[PZ_CMP_GEMM], 12.0 + 6.25 + 7.5 + 10.5 + 7.0, 1e-12);
    fill(&t_on, g, 0);
    pz_compare_attribute(g, t_on.v, t_on.n, 0, &d, &un);
    CHECK_NEAR(d.us[PZ_CMP_SH_GU], 6.0, 1e-12);
    CHECK(d.sig[PZ_CMP_SH_GU] != c.sig[PZ_CMP_SH_GU]);
    /* a MoE layer: donors 3+1 + 4, qkv_a 1+12, MLA 2+1.25+5+1+0.75+20+1+1+1.5+9, gate 0.5+7, MoE 1+6+1+0.5+4+10+4+80+40+5 */
    CHECK_NEAR(c.moe_layer_us, 8.0 + 13.0 + 42.5 + 7.5 + 151.5, 1e-9);
    g_moe_gemms = 0;
    fill(&t_off, g, 1);
    pz_compare_attribute(g, t_off.v, t_off.n, 0, &c, &un);
    CHECK(c.us[PZ_CMP_SH_GU] < 0 && c.nodes[PZ_CMP_SH_GU] == 0);
    CHECK_NEAR(c.us[PZ_CMP_GEMM], 12.0 + 6.25 + 7.5 + 10.5, 1e-12);
    pz_graph_free(g);
  }
  /* DeepSeek-V2-Lite: no q LoRA, q_proj + kv_a_proj count as qkv_a; no q_b. */
  {
    pz_graph *g = graph("deepseek_v2_lite", 0);
    pz_cmp_components c;
    int un = -1;
    fill(&t_off, g, 1);
    pz_compare_attribute(g, t_off.v, t_off.n, 0, &c, &un);
    CHECK_NEAR(c.us[PZ_CMP_QKV_A], 24.0, 1e-12); /* two GEMMs per layer: (2*11 + 2*13) / 2 */
    CHECK(c.us[PZ_CMP_Q_B] < 0);
    CHECK_NEAR(c.us[PZ_CMP_O_PROJ], 10.5, 1e-12);
    CHECK_NEAR(c.us[PZ_CMP_GATE], 7.5, 1e-12);
    CHECK_NEAR(c.us[PZ_CMP_GEMM], 42.0, 1e-12);
    pz_graph_free(g);
  }
  TEST_DONE();
}
