/* GPTQ checkpoint sources (checkpoint_impl.h pz_ck_gptq_source): a module X stored by AutoGPTQ / GPTQModel as
 * X.qweight int32 [in/8, out] (eight 4-bit values of consecutive input columns per word, column 8w+i in bits
 * 4i..4i+3, unsigned, zero point 8 for symmetric GPTQ), X.scales [in/group, out] (F16 as written for an fp16 model;
 * BF16 / F32 taken too), X.qzeros int32 [in/group, out/8] and X.g_idx int32 [in]. Read transposed into the
 * compressed-tensors layout of the INT4 graph tensors (a word's nibbles are the same: q + 8 there, u = q + 8 here)
 * or as values (u - 8) x scale. The scales are rounded to bf16 as compressed-tensors F16 scales are. */
#include "model/checkpoint.h"
#include "model/checkpoint_impl.h"
#include <stdio.h>
#include <string.h>

/* X's tensors for a weight of `out` rows and `in` columns, checked: qweight, scales, and (aux) when stored qzeros
 * (every nibble the symmetric zero as ck->gptq_zero says) and g_idx (column k in group k / group: no act order).
 * aux is false for the scales of packed experts: the same module's words (aux true) scan those once. */
static pz_status gptq_module(pz_checkpoint *ck, const char *base, const char *for_t, int64_t out, int64_t in, bool aux,
                             const pz_st_tensor **qw, const pz_st_tensor **sc) {
  char nm[560], full[600], a[128];
  const int64_t G = ck->int4_group ? ck->int4_group : in;
  if (in % 8 || in % G || out < 1)
    return pz_error(PZ_ERR_SHAPE, "checkpoint %s: GPTQ module \"%s\" (for %s) has %lld input columns, not a multiple of "
                    "8 and of quantization_config.group_size %lld", ck->dir, base, for_t, (long long)in, (long long)G);
  snprintf(nm, sizeof nm, "%s.qweight", base);
  const pz_st_tensor *w = pz_ck_find(ck, nm, full, sizeof full);
  if (!w) return pz_error(PZ_ERR_NOT_FOUND, "checkpoint %s: tensor \"%s\" (for %s) is missing", ck->dir, full, for_t);
  if (!pz_ck_int4_words_dtype_ok(w) || w->ndim != 2 || w->shape[0] != in / 8 || w->shape[1] != out) {
    pz_ck_shape_str(a, sizeof a, w->ndim, w->shape);
    return pz_error(PZ_ERR_SHAPE, "checkpoint %s: \"%s\" must be I32 [%lld, %lld] (GPTQ: eight 4-bit values of the "
                    "[%lld, %lld] weight per word, input columns first), got %s %s; the checkpoint does not match its "
                    "config.json", ck->dir, full, (long long)(in / 8), (long long)out, (long long)out, (long long)in,
                    pz_st_dtype_name(w->dtype), a);
  }
  snprintf(nm, sizeof nm, "%s.scales", base);
  const pz_st_tensor *s = pz_ck_find(ck, nm, full, sizeof full);
  if (!s) return pz_error(PZ_ERR_NOT_FOUND, "checkpoint %s: GPTQ tensor \"%s\" (for %s) is missing", ck->dir, full, for_t);
  if (!pz_ck_int4_scale_dtype_ok(s)) return pz_ck_int4_scale_dtype_err(ck, full, s);
  if (s->ndim != 2 || s->shape[0] != in / G || s->shape[1] != out) {
    pz_ck_shape_str(a, sizeof a, s->ndim, s->shape);
    return pz_error(PZ_ERR_SHAPE, "checkpoint %s: GPTQ scales \"%s\" have shape %s, but quantization_config's group_size "
                    "%lld implies [%lld, %lld]; the checkpoint does not match its config.json", ck->dir, full, a,
                    (long long)(ck->int4_group ? G : -1), (long long)(in / G), (long long)out);
  }
  *qw = w;
  *sc = s;
  if (!aux) return PZ_OK;
  snprintf(nm, sizeof nm, "%s.qzeros", base);
  const pz_st_tensor *z = pz_ck_find(ck, nm, full, sizeof full);
  if (z) {
    if ((z->dtype != PZ_ST_I32 && z->dtype != PZ_ST_U32) || z->ndim != 2 || z->shape[0] != in / G ||
        z->shape[1] != (out + 7) / 8) {
      pz_ck_shape_str(a, sizeof a, z->ndim, z->shape);
      return pz_error(PZ_ERR_SHAPE, "checkpoint %s: GPTQ zero points \"%s\" must be I32 [%lld, %lld], got %s %s", ck->dir,
                      full, (long long)(in / G), (long long)((out + 7) / 8), pz_st_dtype_name(z->dtype), a);
    }
    const uint32_t zw = 0x11111111u * (uint32_t)ck->gptq_zero;
    for (int64_t k = 0; k < z->numel; k++) {
      uint32_t v;
      memcpy(&v, (const char *)z->data + 4 * k, 4);
      const int64_t col = k % z->shape[1], valid = out - 8 * col < 8 ? out - 8 * col : 8; /* nibbles past out: padding */
      const uint32_t mask = valid >= 8 ? 0xffffffffu : (1u << (4 * valid)) - 1u;
      if ((v & mask) != (zw & mask))
        return pz_error(PZ_ERR_UNSUPPORTED, "checkpoint %s: GPTQ zero points \"%s\" word [%lld, %lld] is 0x%08x, not the "
                        "symmetric zero point (every nibble %d for checkpoint_format \"%s\"); an asymmetric export, or "
                        "checkpoint_format does not match the file", ck->dir, full, (long long)(k / z->shape[1]),
                        (long long)col, v, ck->gptq_zero, ck->gptq_zero == 8 ? "gptq_v2" : "gptq");
    }
  }
  snprintf(nm, sizeof nm, "%s.g_idx", base);
  const pz_st_tensor *gi = pz_ck_find(ck, nm, full, sizeof full);
  if (gi) {
    if ((gi->dtype != PZ_ST_I32 && gi->dtype != PZ_ST_I64) || gi->ndim != 1 || gi->shape[0] != in)
      return pz_error(PZ_ERR_SHAPE, "checkpoint %s: GPTQ \"%s\" must be I32 [%lld]", ck->dir, full, (long long)in);
    for (int64_t k = 0; k < in; k++) {
      int64_t v;
      if (gi->dtype == PZ_ST_I64) memcpy(&v, (const char *)gi->data + 8 * k, 8);
      else {
        int32_t v32;
        memcpy(&v32, (const char *)gi->data + 4 * k, 4);
        v = v32;
      }
      if (v != k / G)
        return pz_error(PZ_ERR_UNSUPPORTED, "checkpoint %s: GPTQ \"%s\"[%lld] is %lld, not %lld: the groups are permuted "
                        "(act order: desc_act true, which quantization_config does not say), which prezero's INT4 layout "
                        "does not have; the weights would be read wrongly, so it is not loaded", ck->dir, full,
                        (long long)k, (long long)v, (long long)(k / G));
    }
  }
  return PZ_OK;
}

pz_status pz_ck_gptq_source(pz_checkpoint *ck, const char *name, const char *for_t, int nd, const int64_t *want, int what,
                            src *s) {
  static const char *const suffix[] = {".weight", ".weight_packed", ".weight_scale"};
  const size_t nl = strlen(name), sl = strlen(suffix[what]);
  if (nd != 2 || nl <= sl || strcmp(name + nl - sl, suffix[what]))
    return pz_error(PZ_ERR_SHAPE, "checkpoint %s: GPTQ weights are read for 2-D Linear modules only (%s)", ck->dir, for_t);
  char base[512];
  snprintf(base, sizeof base, "%.*s", (int)(nl - sl), name);
  const int64_t out = want[0], in = what == 0 ? want[1] : what == 1 ? want[1] * 8 : want[1] * 32;
  const pz_st_tensor *qw = NULL, *sc = NULL;
  PZ_CHECK(gptq_module(ck, base, for_t, out, in, what != 2, &qw, &sc));
  const int64_t G = ck->int4_group ? ck->int4_group : in;
  memset(s, 0, sizeof *s);
  s->gptq = true;
  s->rows = out;
  s->cols = want[1];
  if (what == 0) { /* values: (u - 8) x scale */
    s->w = qw;
    s->qscale = sc;
    s->group = G;
  } else if (what == 1) { /* packed words, transposed */
    s->w = qw;
    s->raw = true;
  } else { /* scales, transposed, each repeated over the 32-column groups it covers */
    s->gptq = false; /* a scale gather like compressed-tensors' coarse groups, with GPTQ's strides */
    s->w = sc;
    s->rep = G / 32;
    s->srow = 1;
    s->sgrp = out;
  }
  return PZ_OK;
}
