/* Checkpoint plans (checkpoint.h pz_checkpoint_plan): which checkpoint tensors feed each graph weight
 * under the DeepSeek family's and the GQA layouts' names, how they are fused, split and sharded per
 * TP rank, and the checks of their shapes and dtypes before anything is filled (INT4 and FP8 sources:
 * checkpoint_quant.c). */
#include "model/checkpoint.h"
#include "model/checkpoint_impl.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/dtype.h"

/* The tensor `name` (a Hugging Face name without the checkpoint's prefix); full[] gets the name
 * as stored, for messages. */
const pz_st_tensor *pz_ck_find(const pz_checkpoint *ck, const char *name, char *full, size_t cap) {
  if (ck->lm_inner && !strncmp(name, "model.", 6)) snprintf(full, cap, "model.language_model.%s", name + 6);
  else snprintf(full, cap, "%s%s", ck->prefix, name);
  return pz_checkpoint_find(ck, full);
}

void pz_ck_free_plans(pz_checkpoint *ck) {
  for (int i = 0; i < ck->n_plans; i++) {
    for (int k = 0; ck->plans[i].s && k < ck->plans[i].n_src; k++) free((void *)ck->plans[i].s[k].scale);
    free(ck->plans[i].s);
  }
  free(ck->plans);
  ck->plans = NULL;
  ck->n_plans = 0;
}

void pz_ck_shape_str(char *buf, size_t cap, int nd, const int64_t *ne) {
  size_t o = (size_t)snprintf(buf, cap, "[");
  for (int d = 0; d < nd && o < cap; d++) o += (size_t)snprintf(buf + o, cap - o, "%s%lld", d ? ", " : "", (long long)ne[d]);
  if (o < cap) snprintf(buf + o, cap - o, "]");
}

/* Finds `name`, checks its shape == want[nd] and its dtype, and fills a source view. dst_dtype
 * i32 (packed INT4 words) and u8 (e4m3 bytes) take the tensor as stored. */
static pz_status get_src(pz_checkpoint *ck, const char *name, const char *for_t, int nd, const int64_t *want,
                         pz_dtype dst_dtype, src *s) {
  char full[600], alt[600], altf[640], ctname[512];
  size_t nl = strlen(name);
  if (ck->fp8_ct && nl > 17 && !strcmp(name + nl - 17, ".weight_scale_inv")) { /* compressed-tensors' name for them */
    snprintf(ctname, sizeof ctname, "%.*s", (int)(nl - 4), name);
    name = ctname;
    nl -= 4;
  }
  const pz_st_tensor *w = pz_ck_find(ck, name, full, sizeof full);
  if (!w && ck->gptq) { /* GPTQ's X.qweight / X.scales for X.weight (values), X.weight_packed, X.weight_scale */
    static const char *const suf[] = {".weight", ".weight_packed", ".weight_scale"};
    for (int k = 0; k < 3; k++) {
      const size_t sl = strlen(suf[k]);
      if (nl <= sl || strcmp(name + nl - sl, suf[k])) continue;
      snprintf(alt, sizeof alt, "%.*s.qweight", (int)(nl - sl), name);
      const bool want_ok = k == 0 ? (dst_dtype == PZ_BF16 || dst_dtype == PZ_F32) : k == 1 ? dst_dtype == PZ_I32
                                                                                           : dst_dtype == PZ_BF16;
      if (want_ok && pz_ck_find(ck, alt, altf, sizeof altf)) return pz_ck_gptq_source(ck, name, for_t, nd, want, k, s);
    }
  }
  if (!w && nl > 7 && !strcmp(name + nl - 7, ".weight") && (dst_dtype == PZ_BF16 || dst_dtype == PZ_F32)) {
    snprintf(alt, sizeof alt, "%s_packed", name);
    if (pz_ck_find(ck, alt, altf, sizeof altf)) return pz_ck_int4_values(ck, name, for_t, nd, want, s);
  }
  if (!w) {
    if (nl > 14 && !strcmp(name + nl - 14, ".weight_packed")) {
      snprintf(alt, sizeof alt, "%.*s", (int)(nl - 7), name); /* X.weight */
      const pz_st_tensor *a = pz_ck_find(ck, alt, altf, sizeof altf);
      if (a)
        return pz_error(PZ_ERR_DTYPE, "checkpoint %s: config.json's quantization_config makes %s INT4 but the checkpoint "
                        "stores \"%s\" %s; fix quantization_config (its ignore list) or the checkpoint", ck->dir,
                        for_t, altf, a->dtype == PZ_ST_F8_E4M3 ? "as FP8 (F8_E4M3)" : "unquantised");
    }
    if (dst_dtype == PZ_U8 && nl > 7 && !strcmp(name + nl - 7, ".weight")) {
      snprintf(alt, sizeof alt, "%s_packed", name); /* X.weight_packed */
      if (pz_ck_find(ck, alt, altf, sizeof altf))
        return pz_error(PZ_ERR_DTYPE, "checkpoint %s: config.json's quantization_config is fp8 (e4m3 weights for %s) but "
                        "the checkpoint stores \"%s\", compressed-tensors INT4; fix quantization_config or the checkpoint",
                        ck->dir, for_t, altf);
    }
    if (!ck->gptq && nl > 7 && !strcmp(name + nl - 7, ".weight")) { /* GPTQ tensors under a config that is not GPTQ */
      snprintf(alt, sizeof alt, "%.*s.qweight", (int)(nl - 7), name);
      if (pz_ck_find(ck, alt, altf, sizeof altf))
        return pz_error(PZ_ERR_CONFIG, "checkpoint %s: it stores GPTQ tensors (\"%s\") but config.json has no gptq "
                        "quantization_config; an older AutoGPTQ export keeps it in quantize_config.json, which prezero "
                        "does not read: copy it into config.json as \"quantization_config\" with \"quant_method\": "
                        "\"gptq\"", ck->dir, altf);
    }
    return pz_error(PZ_ERR_NOT_FOUND, "checkpoint %s: tensor \"%s\" (for %s) is missing; the checkpoint does not match its "
                    "config.json", ck->dir, full, for_t);
  }
  const bool int4_scale = ck->quant_kind == PZ_WQ_INT4 && nl > 13 && !strcmp(name + nl - 13, ".weight_scale");
  if (int4_scale && !pz_ck_int4_scale_dtype_ok(w)) return pz_ck_int4_scale_dtype_err(ck, full, w); /* as get_int4_values */
  if (int4_scale && nd == 2) return pz_ck_int4_coarse_scale(ck, full, w, want, s); /* any stored group, 32 too */
  bool same = w->ndim == nd;
  for (int d = 0; same && d < nd; d++) same = w->shape[d] == want[d];
  if (!same) {
    char a[128], b[128];
    pz_ck_shape_str(a, sizeof a, w->ndim, w->shape);
    pz_ck_shape_str(b, sizeof b, nd, want);
    return pz_error(PZ_ERR_SHAPE, "checkpoint %s: tensor \"%s\" has shape %s, config.json implies %s; the checkpoint does "
                    "not match its config.json", ck->dir, full, a, b);
  }
  memset(s, 0, sizeof *s);
  s->w = w;
  s->cols = nd ? want[nd - 1] : 1;
  s->rows = s->cols ? w->numel / s->cols : 0;
  if (dst_dtype == PZ_I32 || dst_dtype == PZ_U8) {
    const pz_st_dtype need = dst_dtype == PZ_I32 ? PZ_ST_I32 : PZ_ST_F8_E4M3;
    if (w->dtype != need && !(dst_dtype == PZ_I32 && pz_ck_int4_words_dtype_ok(w)))
      return pz_error(PZ_ERR_DTYPE, "checkpoint %s: tensor \"%s\" has dtype %s; %s needs %s (%s)", ck->dir, full,
                      pz_st_dtype_name(w->dtype), for_t, pz_st_dtype_name(need),
                      dst_dtype == PZ_I32 ? "compressed-tensors pack-quantized words" : "FP8 e4m3 experts kept as FP8");
    if (dst_dtype == PZ_I32 && nd == 2 && nl > 14 && !strcmp(name + nl - 14, ".weight_packed")) {
      char shn[600]; /* its weight_shape, as for the experts dequantised at load */
      snprintf(shn, sizeof shn, "%.*s.weight_shape", (int)(nl - 14), name);
      PZ_CHECK(pz_ck_check_weight_shape(ck, shn, want[0], want[1] * 8));
    }
    s->raw = true;
    return PZ_OK;
  }
  if (w->dtype == PZ_ST_BF16 || w->dtype == PZ_ST_F32 || w->dtype == PZ_ST_F16) return PZ_OK;
  if (w->dtype == PZ_ST_F8_E4M3 && dst_dtype == PZ_BF16 && nd == 2) return pz_ck_fp8_block_scales(ck, name, full, s);
  return pz_error(PZ_ERR_DTYPE, "checkpoint %s: tensor \"%s\" has dtype %s; supported: BF16, F16, F32, F8_E4M3 with "
                  "weight_scale_inv block scales for 2-D bf16 weights, I32 pack-quantized INT4 (weight_packed + "
                  "weight_scale)", ck->dir, full, pz_st_dtype_name(w->dtype));
}

static pz_status alloc_src(plan *p, int n) {
  p->n_src = n;
  if (!(p->s = calloc((size_t)n, sizeof *p->s))) return pz_error(PZ_ERR_OOM, "checkpoint: out of memory");
  return PZ_OK;
}

/* Phi-3 (Phi3ForCausalLM) stores q/k/v as one qkv_proj and gate/up as one gate_up_proj. */
static bool fused_names(const pz_model_config *c) { return !strcmp(c->model_type, "phi3"); }

/* p->s[0, n) as the row ranges [start, start + rows[k]) of the 2-D checkpoint tensor `name` (Phi-3's fused
 * qkv_proj / gate_up_proj, checked as [sum of rows, cols]), one after the other from row 0. An FP8 tensor's
 * block scales are copied for each part, so that each source owns its own (pz_ck_free_plans). */
static pz_status fused_parts(pz_checkpoint *ck, const char *name, const char *for_t, int n, const int64_t *rows,
                             int64_t cols, pz_dtype dtype, plan *p) {
  int64_t total = 0;
  for (int k = 0; k < n; k++) total += rows[k];
  src whole;
  PZ_CHECK(get_src(ck, name, for_t, 2, (int64_t[]){total, cols}, dtype, &whole));
  p->n_src = n;
  if (!(p->s = calloc((size_t)n, sizeof *p->s))) {
    free((void *)whole.scale);
    return pz_error(PZ_ERR_OOM, "checkpoint: out of memory");
  }
  const size_t sbytes = whole.scale ? sizeof(float) * (size_t)(((whole.rows + ck->bm - 1) / ck->bm) * whole.scols) : 0;
  int64_t at = 0;
  for (int k = 0; k < n; k++) {
    p->s[k] = whole;
    p->s[k].row0 = at;
    p->s[k].rows = rows[k];
    at += rows[k];
    if (k == 0 || !whole.scale) continue;
    float *own = malloc(sbytes);
    if (!own) { p->s[k].scale = NULL; return pz_error(PZ_ERR_OOM, "checkpoint: out of memory"); }
    memcpy(own, whole.scale, sbytes);
    p->s[k].scale = own;
  }
  return PZ_OK;
}

/* qkv_proj weight [(heads + 2*kvh)*d, H] bf16 or bias [(heads + 2*kvh)*d] f32 of a GQA layer
 * from q_proj / k_proj / v_proj, or from the rows of Phi-3's fused qkv_proj (checkpoint.h). */
static pz_status plan_qkv(pz_checkpoint *ck, const pz_model_config *c, const pz_tensor *t, int L, bool bias,
                          plan *p) {
  const int tp = ck->tp;
  const int64_t nh = c->num_attention_heads, nkv = c->num_key_value_heads, d = c->head_dim;
  if (nh < 1 || nkv < 1 || d < 1 || nh % tp || (tp <= nkv ? nkv % tp : tp % nkv))
    return pz_error(PZ_ERR_SHAPE, "checkpoint: graph tensor %s: TP %d does not split num_attention_heads %lld / "
                    "num_key_value_heads %lld", t->name, tp, (long long)nh, (long long)nkv);
  const int64_t heads = nh / tp, kvh = tp <= nkv ? nkv / tp : 1, n = (heads + 2 * kvh) * d;
  if (t->ndim != (bias ? 1 : 2) || t->ne[0] != n || (!bias && t->ne[1] != c->hidden_size))
    return pz_error(PZ_ERR_SHAPE, "checkpoint: graph tensor %s is not [(heads + 2*kv_heads)*head_dim = %lld%s] per rank",
                    t->name, (long long)n, bias ? "" : ", hidden_size");
  p->kind = PLAN_QKV;
  p->q_rows = heads * d;
  p->kv_rows = kvh * d;
  p->kv_ranks = tp <= nkv ? 1 : tp / nkv;
  if (fused_names(c)) { /* q rows, then k rows, then v rows (Phi3Attention.forward); no biases */
    if (bias) return pz_error(PZ_ERR_UNSUPPORTED, "checkpoint: graph tensor %s: model_type phi3 has no qkv_proj bias", t->name);
    char hf[512];
    snprintf(hf, sizeof hf, "model.layers.%d.self_attn.qkv_proj.weight", L);
    return fused_parts(ck, hf, t->name, 3, (int64_t[]){nh * d, nkv * d, nkv * d}, c->hidden_size, t->dtype, p);
  }
  PZ_CHECK(alloc_src(p, 3));
  static const char *const proj[] = {"q_proj", "k_proj", "v_proj"};
  for (int i = 0; i < 3; i++) {
    char hf[512];
    snprintf(hf, sizeof hf, "model.layers.%d.self_attn.%s.%s", L, proj[i], bias ? "bias" : "weight");
    const int64_t rows = (i ? nkv : nh) * d;
    PZ_CHECK(get_src(ck, hf, t->name, bias ? 1 : 2, (int64_t[]){rows, c->hidden_size}, t->dtype, &p->s[i]));
  }
  return PZ_OK;
}

/* The GQA layouts' own names (checkpoint.h); *done = false leaves t to the shared rules below. */
static pz_status plan_gqa(pz_checkpoint *ck, const pz_model_config *c, const pz_tensor *t, int L, const char *rest,
                          plan *p, bool *done) {
  char hf[512], hf2[512], f1[600], f2[600];
  *done = true;
  if (!strcmp(rest, "self_attn.qkv_proj.weight")) return plan_qkv(ck, c, t, L, false, p);
  if (!strcmp(rest, "self_attn.qkv_proj.bias")) return plan_qkv(ck, c, t, L, true, p);
  if (!strcmp(rest, "mlp.gate_up_proj.weight")) {
    const int64_t I = c->intermediate_size;
    if (t->ndim != 2 || I % ck->tp || t->ne[0] != 2 * (I / ck->tp) || t->ne[1] != c->hidden_size)
      return pz_error(PZ_ERR_SHAPE, "checkpoint: graph tensor %s is not [2 * intermediate_size / TP = %lld, hidden_size]",
                      t->name, (long long)(2 * (I / ck->tp)));
    p->kind = PLAN_GATE_UP;
    p->q_rows = I / ck->tp;
    if (fused_names(c)) { /* gate rows, then up rows (Phi3MLP: chunk(2) of gate_up_proj's output) */
      snprintf(hf, sizeof hf, "model.layers.%d.mlp.gate_up_proj.weight", L);
      return fused_parts(ck, hf, t->name, 2, (int64_t[]){I, I}, c->hidden_size, t->dtype, p);
    }
    PZ_CHECK(alloc_src(p, 2));
    snprintf(hf, sizeof hf, "model.layers.%d.mlp.gate_proj.weight", L);
    snprintf(hf2, sizeof hf2, "model.layers.%d.mlp.up_proj.weight", L);
    PZ_CHECK(get_src(ck, hf, t->name, 2, (int64_t[]){I, c->hidden_size}, t->dtype, &p->s[0]));
    return get_src(ck, hf2, t->name, 2, (int64_t[]){I, c->hidden_size}, t->dtype, &p->s[1]);
  }
  /* Mixtral publishes its MoE as block_sparse_moe.{gate, experts.E.w1 (gate) / w3 (up) / w2
   * (down)}; a checkpoint that has none of those but the mlp.* names (as transformers >= 5
   * saves them) goes on to the shared rules. */
  if (strcmp(c->model_type, "mixtral") != 0) { *done = false; return PZ_OK; }
  snprintf(hf, sizeof hf, "model.layers.%d.block_sparse_moe.gate.weight", L);
  snprintf(hf2, sizeof hf2, "model.layers.%d.mlp.gate.weight", L);
  const bool legacy_gate = pz_ck_find(ck, hf, f1, sizeof f1) || !pz_ck_find(ck, hf2, f2, sizeof f2);
  if (!strcmp(rest, "mlp.gate.weight") && legacy_gate) {
    p->kind = PLAN_PLAIN;
    PZ_CHECK(alloc_src(p, 1));
    return get_src(ck, hf, t->name, t->ndim, t->full_ne, t->dtype, &p->s[0]);
  }
  /* The routed experts' graph tensors are "mlp.experts.{gate,up,down}_proj.<what>": <what> "weight"
   * (bf16, or FP8 e4m3 bytes), "weight_scale_inv" (FP8), "weight_packed" / "weight_scale" (INT4), each
   * read from "block_sparse_moe.experts.E.{w1,w3,w2}.<what>". */
  static const char *const ours[] = {"gate_proj.", "up_proj.", "down_proj."};
  static const char *const theirs[] = {"w1", "w3", "w2"};
  char f3[600], hf3[512];
  bool legacy = false, mlp_names = false;
  for (int i = 0; i < 2; i++) { /* bf16 / FP8 names, then INT4 ones */
    snprintf(hf, sizeof hf, "model.layers.%d.block_sparse_moe.experts.0.w1.weight%s", L, i ? "_packed" : "");
    snprintf(hf2, sizeof hf2, "model.layers.%d.mlp.experts.0.gate_proj.weight%s", L, i ? "_packed" : "");
    legacy |= pz_ck_find(ck, hf, f1, sizeof f1) != NULL;
    mlp_names |= pz_ck_find(ck, hf2, f2, sizeof f2) != NULL;
  }
  snprintf(hf3, sizeof hf3, "model.layers.%d.mlp.experts.gate_up_proj", L);
  legacy = legacy || (!mlp_names && !pz_ck_find(ck, hf3, f3, sizeof f3));
  if (!strncmp(rest, "mlp.experts.", 12) && t->ndim == 3 && legacy) {
    int k = -1;
    for (int i = 0; i < 3; i++)
      if (!strncmp(rest + 12, ours[i], strlen(ours[i]))) k = i;
    const char *what = k < 0 ? NULL : rest + 12 + strlen(ours[k]);
    if (!what || (strcmp(what, "weight") && strcmp(what, "weight_scale_inv") && strcmp(what, "weight_packed") &&
                  strcmp(what, "weight_scale"))) {
      *done = false;
      return PZ_OK;
    }
    p->kind = PLAN_EXPERTS;
    PZ_CHECK(alloc_src(p, (int)t->full_ne[0]));
    for (int64_t e = 0; e < t->full_ne[0]; e++) {
      snprintf(hf, sizeof hf, "model.layers.%d.block_sparse_moe.experts.%lld.%s.%s", L, (long long)e, theirs[k], what);
      PZ_CHECK(get_src(ck, hf, t->name, 2, (int64_t[]){t->full_ne[1], t->full_ne[2]}, t->dtype, &p->s[e]));
    }
    return PZ_OK;
  }
  *done = false;
  return PZ_OK;
}

static pz_status plan_one(pz_checkpoint *ck, const pz_model_config *c, const pz_tensor *t, plan *p) {
  char hf[512], hf2[512];
  const char *nm = t->name;
  const int nd = t->ndim;
  const int64_t *full = t->full_ne;
  int L = -1, used = 0;
  const char *rest = NULL;
  if (sscanf(nm, "layers.%d.%n", &L, &used) == 1 && used > 0) rest = nm + used;
  if (rest && c->attn == PZ_ATTN_GQA) {
    bool done;
    PZ_CHECK(plan_gqa(ck, c, t, L, rest, p, &done));
    if (done) return PZ_OK;
  }

  if (rest && !strcmp(rest, "self_attn.fused_qkv_a_proj.weight")) {
    if (nd != 2 || c->q_lora_rank <= 0 || full[0] <= c->q_lora_rank)
      return pz_error(PZ_ERR_SHAPE, "checkpoint: graph tensor %s is not [q_lora + kv_lora + rope, H]", nm);
    p->kind = PLAN_CONCAT_ROWS;
    p->n_src = 2;
    p->split = c->q_lora_rank;
    if (!(p->s = calloc(2, sizeof *p->s))) return pz_error(PZ_ERR_OOM, "checkpoint: out of memory");
    snprintf(hf, sizeof hf, "model.layers.%d.self_attn.q_a_proj.weight", L);
    snprintf(hf2, sizeof hf2, "model.layers.%d.self_attn.kv_a_proj_with_mqa.weight", L);
    PZ_CHECK(get_src(ck, hf, nm, 2, (int64_t[]){c->q_lora_rank, full[1]}, t->dtype, &p->s[0]));
    PZ_CHECK(get_src(ck, hf2, nm, 2, (int64_t[]){full[0] - c->q_lora_rank, full[1]}, t->dtype, &p->s[1]));
    return PZ_OK;
  }
  if (rest && (!strcmp(rest, "self_attn.kv_b_proj.w_uk") || !strcmp(rest, "self_attn.kv_b_proj.w_uv"))) {
    if (nd != 3) return pz_error(PZ_ERR_SHAPE, "checkpoint: graph tensor %s is not 3-D", nm);
    p->kind = strstr(rest, "w_uk") ? PLAN_KVB_UK : PLAN_KVB_UV;
    p->n_src = 1;
    p->split = c->qk_nope_head_dim + c->v_head_dim;
    p->nope = c->qk_nope_head_dim;
    if (!(p->s = calloc(1, sizeof *p->s))) return pz_error(PZ_ERR_OOM, "checkpoint: out of memory");
    snprintf(hf, sizeof hf, "model.layers.%d.self_attn.kv_b_proj.weight", L);
    return get_src(ck, hf, nm, 2, (int64_t[]){full[0] * p->split, full[2]}, t->dtype, &p->s[0]);
  }
  if (rest && !strncmp(rest, "mlp.experts.", 12) && nd == 3) {
    const char *proj = rest + 12; /* "gate_proj.weight" */
    snprintf(hf, sizeof hf, "model.layers.%d.mlp.experts.0.%s", L, proj);
    const bool up = !strcmp(proj, "up_proj.weight"), down = !strcmp(proj, "down_proj.weight");
    snprintf(hf2, sizeof hf2, "model.layers.%d.mlp.experts.%s", L, down ? "down_proj" : "gate_up_proj");
    char f1[600], f2[600];
    if (!pz_ck_find(ck, hf, f1, sizeof f1) && pz_ck_find(ck, hf2, f2, sizeof f2)) {
      /* transformers >= 5 layout: gate_up_proj [E, 2I, H] (gate rows first), down_proj [E, H, I]. */
      p->kind = PLAN_EXPERTS_FUSED;
      p->n_src = 1;
      p->split = down ? full[1] : 2 * full[1];
      p->nope = up ? full[1] : 0;
      if (!(p->s = calloc(1, sizeof *p->s))) return pz_error(PZ_ERR_OOM, "checkpoint: out of memory");
      return get_src(ck, hf2, nm, 3, (int64_t[]){full[0], p->split, full[2]}, t->dtype, &p->s[0]);
    }
    char hf3[512], f3[600];
    snprintf(hf3, sizeof hf3, "model.layers.%d.mlp.experts.%s", L, down ? "gate_up_proj" : "down_proj");
    if ((up || down || !strcmp(proj, "gate_proj.weight")) && !pz_ck_find(ck, hf, f1, sizeof f1) &&
        pz_ck_find(ck, hf3, f3, sizeof f3))
      /* The other projection is fused (transformers >= 5): name the fused tensor that is missing. */
      return pz_error(PZ_ERR_NOT_FOUND, "checkpoint %s: it holds \"%s\" (fused experts, as transformers >= 5 saves "
                      "them) but neither \"%s\" nor per-expert \"%s\" (for %s); the checkpoint is incomplete", ck->dir,
                      f3, f2, f1, nm);
    p->kind = PLAN_EXPERTS;
    p->n_src = (int)full[0];
    if (!(p->s = calloc((size_t)full[0], sizeof *p->s))) return pz_error(PZ_ERR_OOM, "checkpoint: out of memory");
    for (int64_t e = 0; e < full[0]; e++) {
      snprintf(hf, sizeof hf, "model.layers.%d.mlp.experts.%lld.%s", L, (long long)e, proj);
      PZ_CHECK(get_src(ck, hf, nm, 2, (int64_t[]){full[1], full[2]}, t->dtype, &p->s[e]));
    }
    return PZ_OK;
  }
  p->kind = PLAN_PLAIN;
  p->n_src = 1;
  if (!(p->s = calloc(1, sizeof *p->s))) return pz_error(PZ_ERR_OOM, "checkpoint: out of memory");
  if (!strcmp(nm, "lm_head.weight")) {
    snprintf(hf, sizeof hf, "%s", nm);
    char f1[600];
    if (!pz_ck_find(ck, hf, f1, sizeof f1) && (ck->tie_word_embeddings || c->tie_word_embeddings))
      snprintf(hf, sizeof hf, "model.embed_tokens.weight");
  } else {
    snprintf(hf, sizeof hf, "model.%s", nm);
    /* Tied, with only lm_head.weight stored: safetensors' save_model keeps the first name (sorted) of tensors
     * that share memory, and transformers ties the embedding to that head. */
    char f1[600];
    if (!strcmp(nm, "embed_tokens.weight") && (ck->tie_word_embeddings || c->tie_word_embeddings) &&
        !pz_ck_find(ck, hf, f1, sizeof f1) && pz_ck_find(ck, "lm_head.weight", f1, sizeof f1))
      snprintf(hf, sizeof hf, "lm_head.weight");
  }
  return get_src(ck, hf, nm, nd, full, t->dtype, &p->s[0]);
}

/* Element i of a BF16, F16 or F32 tensor, widened to f32 (exact). */
static float float_at(const pz_st_tensor *t, int64_t i) {
  if (t->dtype == PZ_ST_F32) {
    float v;
    memcpy(&v, (const char *)t->data + 4 * i, 4);
    return v;
  }
  uint16_t h;
  memcpy(&h, (const char *)t->data + 2 * i, 2);
  return t->dtype == PZ_ST_BF16 ? pz_bf16_to_f32(h) : pz_ck_f16_to_f32(h);
}

/* True when a and b are BF16 / F16 / F32 tensors of one shape holding the same values, their dtypes
 * differing (a tied head some exporters store in F32 beside a BF16 embedding). */
static bool tensor_values_equal(const pz_st_tensor *a, const pz_st_tensor *b) {
  const pz_st_dtype ok[] = {PZ_ST_BF16, PZ_ST_F16, PZ_ST_F32};
  bool fa = false, fb = false;
  for (int k = 0; k < 3; k++) { fa |= a->dtype == ok[k]; fb |= b->dtype == ok[k]; }
  if (!fa || !fb || a->dtype == b->dtype || a->ndim != b->ndim || a->numel != b->numel) return false;
  for (int k = 0; k < a->ndim; k++)
    if (a->shape[k] != b->shape[k]) return false;
  for (int64_t i = 0; i < a->numel; i++)
    if (float_at(a, i) != float_at(b, i)) return false; /* a NaN differs from everything */
  return true;
}

/* tie_word_embeddings true while the checkpoint also holds an lm_head.weight: the graph reads the
 * embedding for the LM head. Hugging Face transformers' versions disagree on such a file (4.x ties the
 * head to the embedding, 5.x keeps the stored lm_head.weight), so unless the two tensors are the same
 * bytes, or the same values in another dtype (BF16 / F16 / F32), it is refused rather than run as one of them. */
static pz_status check_tied_head(const pz_checkpoint *ck) {
  char fe[600], fl[600];
  const pz_st_tensor *e = pz_ck_find(ck, "model.embed_tokens.weight", fe, sizeof fe);
  const pz_st_tensor *l = pz_ck_find(ck, "lm_head.weight", fl, sizeof fl);
  if (!e || !l) return PZ_OK;
  bool same = e->dtype == l->dtype && e->ndim == l->ndim && e->nbytes == l->nbytes;
  for (int k = 0; same && k < e->ndim; k++) same = e->shape[k] == l->shape[k];
  if (same && (!e->nbytes || !memcmp(e->data, l->data, e->nbytes))) return PZ_OK;
  if (tensor_values_equal(e, l)) return PZ_OK;
  return pz_error(PZ_ERR_CONFIG, "checkpoint %s: config.json sets tie_word_embeddings true but \"%s\" differs from \"%s\" "
                  "(transformers 4 uses the embedding, 5 the stored head); set tie_word_embeddings false to use %s, or "
                  "remove it from the checkpoint to use the embedding", ck->dir, fl, fe, fl);
}

pz_status pz_checkpoint_plan(pz_checkpoint *ck, const pz_model_config *c, const pz_graph *g) {
  if (!ck || !c || !g) return pz_error(PZ_ERR_INVALID_ARG, "pz_checkpoint_plan: NULL argument");
  pz_ck_free_plans(ck);
  ck->plans = calloc((size_t)(g->n_tensors ? g->n_tensors : 1), sizeof *ck->plans);
  if (!ck->plans) return pz_error(PZ_ERR_OOM, "checkpoint: out of memory");
  ck->n_plans = g->n_tensors;
  ck->tp = g->info.tp;
  ck->int4_group = c->quant.kind == PZ_WQ_INT4 ? c->quant.stored_group : 32;
  ck->quant_kind = (int)c->quant.kind;
  ck->fp8_ct = c->quant.kind == PZ_WQ_FP8 && c->quant.ct_fp8;
  ck->gptq = c->quant.kind == PZ_WQ_INT4 && c->quant.gptq;
  ck->gptq_zero = c->quant.gptq_zero;
  if (c->quant.kind == PZ_WQ_FP8) { /* the parsed config's block (checkpoint.c's early read is the fallback) */
    ck->bm = c->quant.block_rows;
    ck->bn = c->quant.block_cols;
  }
  /* Kimi-K2.5 keeps the text model under "language_model." (its config wraps it in text_config). */
  ck->prefix[0] = 0;
  ck->lm_inner = false;
  if (!pz_checkpoint_find(ck, "model.embed_tokens.weight") && pz_checkpoint_find(ck, "language_model.model.embed_tokens.weight"))
    snprintf(ck->prefix, sizeof ck->prefix, "language_model.");
  else if (!pz_checkpoint_find(ck, "model.embed_tokens.weight") &&
           pz_checkpoint_find(ck, "model.language_model.embed_tokens.weight"))
    ck->lm_inner = true; /* and lm_head.weight (or the tied embedding) as it is */
  if (ck->tie_word_embeddings || c->tie_word_embeddings) {
    pz_status st = check_tied_head(ck);
    if (st != PZ_OK) { pz_ck_free_plans(ck); return st; }
  }
  ck->total_bytes = ck->done_bytes = 0;
  for (int i = 0; i < g->n_tensors; i++) {
    const pz_tensor *t = &g->tensors[i];
    if (t->kind != PZ_T_WEIGHT || t->view_of >= 0) continue;
    pz_status st = plan_one(ck, c, t, &ck->plans[i]);
    if (st != PZ_OK) { pz_ck_free_plans(ck); return st; }
    ck->total_bytes += pz_tensor_numel(t) * (int64_t)pz_dtype_size(t->dtype) * ck->tp;
  }
  /* A ".bias" of the layers the graph runs (or outside the layers) that no plan reads would be
   * dropped, and the tokens silently wrong: transformers gives o_proj a bias when a Llama / Qwen3
   * config has attention_bias true, for example, and prezero's o_proj has none. Refused. */
  /* The same for the zero points and the column order of an INT4 layout that prezero's does not have
   * (asymmetric, actorder "group"), whatever the config says: the weights would be read wrongly; and for a
   * module stored both unquantised and pack-quantized. */
  /* the text model's names: under ck->prefix, or "model.language_model." (its layers "layers.N.") */
  const char *tp = ck->lm_inner ? "model.language_model." : ck->prefix;
  const char *layers_fmt = ck->lm_inner ? "layers.%d." : "model.layers.%d.";
  const size_t pl = strlen(tp);
  for (int k = 0; k < ck->n; k++) {
    const char *nm = ck->table[k]->name;
    const size_t l = strlen(nm);
    if (strncmp(nm, tp, pl)) continue;
    const char *layout = l > 18 && !strcmp(nm + l - 18, ".weight_zero_point") ? "zero points (asymmetric INT4)"
                         : l > 13 && !strcmp(nm + l - 13, ".weight_g_idx")    ? "a column order (actorder)"
                                                                              : NULL;
    if (layout) {
      pz_ck_free_plans(ck);
      return pz_error(PZ_ERR_UNSUPPORTED, "checkpoint %s: tensor \"%s\" holds %s, which prezero's INT4 layout does not "
                      "have (symmetric, columns in their stored order); the weights would be read wrongly, so it is not "
                      "loaded",
                      ck->dir, nm, layout);
    }
    /* One module stored twice, as X.weight and as pack-quantized X.weight_packed or GPTQ X.qweight (a tool that
     * kept the source weight beside the compressed one): which one prezero read would depend on how the config
     * names it. */
    const size_t qs = l > 14 && !strcmp(nm + l - 14, ".weight_packed") ? 14 : l > 8 && !strcmp(nm + l - 8, ".qweight") ? 8 : 0;
    if (qs) { /* compressed-tensors' X.weight_packed, GPTQ's X.qweight */
      char plain[600];
      snprintf(plain, sizeof plain, "%.*s.weight", (int)(l - qs), nm);
      const pz_st_tensor *twin = pz_checkpoint_find(ck, plain);
      if (twin) {
        pz_ck_free_plans(ck);
        return pz_error(PZ_ERR_DTYPE, "checkpoint %s: module \"%.*s\" is stored twice, as \"%s\" (%s) and as "
                        "%s \"%s\"; prezero would read one and drop the other, so it is not loaded: remove the stale "
                        "one", ck->dir, (int)(l - qs), nm, plain, pz_st_dtype_name(twin->dtype),
                        qs == 8 ? "GPTQ" : "pack-quantized", nm);
      }
    }
  }
  for (int k = 0; k < ck->n; k++) {
    const char *nm = ck->table[k]->name;
    const size_t l = strlen(nm);
    if (l < 5 || strcmp(nm + l - 5, ".bias") || strncmp(nm, tp, pl)) continue;
    int L = -1;
    if (sscanf(nm + pl, layers_fmt, &L) == 1 && (L < 0 || L >= g->info.n_layers)) continue; /* not run */
    bool used = false;
    for (int i = 0; i < ck->n_plans && !used; i++)
      for (int j = 0; j < ck->plans[i].n_src && !used; j++) used = ck->plans[i].s[j].w == ck->table[k];
    if (!used) {
      pz_ck_free_plans(ck);
      return pz_error(PZ_ERR_UNSUPPORTED, "checkpoint %s: tensor \"%s\" is a bias that prezero's %s layers have no place "
                      "for (for example o_proj's when attention_bias is true); the model would run without it, so it is "
                      "not loaded", ck->dir, nm, c->model_type[0] ? c->model_type : "MLA");
    }
  }
  return PZ_OK;
}
