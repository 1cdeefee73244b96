/* Quantised checkpoint sources (checkpoint_impl.h): compressed-tensors pack-quantized INT4 tensors (their
 * words, scales and weight_shape checked; read as values, or kept packed with the scales repeated to the
 * kernels' 32-column groups) and the block scales of FP8 e4m3 weights dequantised at load. */
#include "model/checkpoint.h"
#include "model/checkpoint_impl.h"
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/dtype.h"

/* INT4 scales are BF16 (the published Kimi checkpoints), or F16 / F32 (compressed-tensors writes the scales in the
 * dtype of the model it quantised), which checkpoint_fill.c rounds to bf16 as it reads F16 / F32 weights. */
bool pz_ck_int4_scale_dtype_ok(const pz_st_tensor *sc) {
  return sc->dtype == PZ_ST_BF16 || sc->dtype == PZ_ST_F16 || sc->dtype == PZ_ST_F32;
}
pz_status pz_ck_int4_scale_dtype_err(const pz_checkpoint *ck, const char *full, const pz_st_tensor *sc) {
  return pz_error(PZ_ERR_DTYPE, "checkpoint %s: \"%s\" is %s; INT4 scales must be BF16, F16 or F32", ck->dir, full,
                  pz_st_dtype_name(sc->dtype));
}

/* pack-quantized words: I32 as compressed-tensors writes them, or the same bits as U32. */
bool pz_ck_int4_words_dtype_ok(const pz_st_tensor *w) { return w->dtype == PZ_ST_I32 || w->dtype == PZ_ST_U32; }

/* "X.weight_shape" (shn) of a pack-quantized tensor: present, an I64 or I32 [2] holding [rows, cols]. */
pz_status pz_ck_check_weight_shape(const pz_checkpoint *ck, const char *shn, int64_t rows, int64_t cols) {
  char full[600];
  const pz_st_tensor *sh = pz_ck_find(ck, shn, full, sizeof full);
  int64_t shape[2] = {0, 0};
  if (sh && (sh->dtype == PZ_ST_I64 || sh->dtype == PZ_ST_I32) && sh->numel == 2)
    for (int d = 0; d < 2; d++) {
      if (sh->dtype == PZ_ST_I64) memcpy(&shape[d], (const char *)sh->data + 8 * d, 8);
      else { int32_t v; memcpy(&v, (const char *)sh->data + 4 * d, 4); shape[d] = v; }
    }
  if (sh && shape[0] == rows && shape[1] == cols) return PZ_OK;
  char got[160];
  if (!sh) snprintf(got, sizeof got, "it is missing");
  else if ((sh->dtype == PZ_ST_I64 || sh->dtype == PZ_ST_I32) && sh->numel == 2)
    snprintf(got, sizeof got, "it holds [%lld, %lld]", (long long)shape[0], (long long)shape[1]);
  else {
    char a[128];
    pz_ck_shape_str(a, sizeof a, sh->ndim, sh->shape);
    snprintf(got, sizeof got, "it is %s %s", pz_st_dtype_name(sh->dtype), a);
  }
  return pz_error(PZ_ERR_SHAPE, "checkpoint %s: \"%s\" must be an integer [2] holding [%lld, %lld], but %s; the checkpoint "
                  "does not match its config.json", ck->dir, full, (long long)rows, (long long)cols, got);
}

/* "group_size G" or "strategy \"channel\"": the INT4 quantization_config's stored group, for messages. */
static void int4_group_str(const pz_checkpoint *ck, char *buf, size_t cap) {
  if (ck->int4_group) snprintf(buf, cap, "group_size %d", ck->int4_group);
  else snprintf(buf, cap, "strategy \"channel\"");
}

/* Under an INT4 quantization_config: a weight of `in` columns (the tensor `wname` has them, for the message) is a
 * whole number of the config's groups, and its scales `sc` (`full` as stored) are [rows, in / group] ([rows, 1]
 * per channel). *G gets the group. Errors: PZ_ERR_SHAPE naming the tensor and the group the config gives. */
static pz_status config_scale_shape(const pz_checkpoint *ck, const char *wname, const char *full,
                                    const pz_st_tensor *sc, int64_t rows, int64_t in, int64_t *G) {
  *G = ck->int4_group ? ck->int4_group : in;
  char grp[64], a[128];
  int4_group_str(ck, grp, sizeof grp);
  if (in % *G)
    return pz_error(PZ_ERR_SHAPE, "checkpoint %s: INT4 tensor \"%s\" has %lld columns, not a multiple of "
                    "quantization_config's %s", ck->dir, wname, (long long)in, grp);
  if (sc->ndim != 2 || sc->shape[0] != rows || sc->shape[1] != in / *G) {
    pz_ck_shape_str(a, sizeof a, sc->ndim, sc->shape);
    return pz_error(PZ_ERR_SHAPE, "checkpoint %s: INT4 scales \"%s\" have shape %s, but quantization_config's %s "
                    "implies [%lld, %lld]; the checkpoint does not match its config.json", ck->dir, full, a, grp,
                    (long long)rows, (long long)(in / *G));
  }
  return PZ_OK;
}

/* INT4 source read as values: `name` = "X.weight" is absent, "X.weight_packed" int32 [rows, cols/8],
 * "X.weight_scale" [rows, cols/group] and "X.weight_shape" [rows, cols] are there (compressed-tensors
 * pack-quantized). The group is the INT4 quantization_config's (cols a multiple of it); only without one does it
 * follow from the scale's shape. */
pz_status pz_ck_int4_values(pz_checkpoint *ck, const char *name, const char *for_t, int nd, const int64_t *want, src *s) {
  char base[512], pn[560], sn[560], shn[560], full[600];
  snprintf(base, sizeof base, "%.*s", (int)(strlen(name) - strlen(".weight")), name);
  snprintf(pn, sizeof pn, "%s.weight_packed", base);
  snprintf(sn, sizeof sn, "%s.weight_scale", base);
  snprintf(shn, sizeof shn, "%s.weight_shape", base);
  const pz_st_tensor *w = pz_ck_find(ck, pn, full, sizeof full);
  if (nd != 2 || want[1] % 8)
    return pz_error(PZ_ERR_SHAPE, "checkpoint %s: INT4 tensor \"%s\" (for %s) must be 2-D with columns a multiple of 8; "
                    "prezero reads pack-quantized weights of 2-D Linear modules only", ck->dir, full, for_t);
  if (!pz_ck_int4_words_dtype_ok(w) || w->ndim != 2 || w->shape[0] != want[0] || w->shape[1] != want[1] / 8) {
    char a[128];
    pz_ck_shape_str(a, sizeof a, w->ndim, w->shape);
    return pz_error(PZ_ERR_SHAPE, "checkpoint %s: \"%s\" must be I32 [%lld, %lld] (eight 4-bit values per word of the "
                    "[%lld, %lld] weight), got %s %s; the checkpoint does not match its config.json", ck->dir, full,
                    (long long)want[0], (long long)(want[1] / 8), (long long)want[0], (long long)want[1],
                    pz_st_dtype_name(w->dtype), a);
  }
  char wfull[600];
  snprintf(wfull, sizeof wfull, "%s", full); /* weight_packed's name as stored */
  const pz_st_tensor *sc = pz_ck_find(ck, sn, full, sizeof full);
  if (!sc)
    return pz_error(PZ_ERR_NOT_FOUND, "checkpoint %s: INT4 tensor \"%s\" has no scales \"%s\"; pack-quantized weights need "
                    "their weight_scale", ck->dir, wfull, full);
  if (!pz_ck_int4_scale_dtype_ok(sc)) return pz_ck_int4_scale_dtype_err(ck, full, sc);
  if (ck->quant_kind == PZ_WQ_INT4) {
    /* The config's group, not one inferred from the scales' shape: [rows, 2] over 160 columns under group_size 128
     * (the ceil(160 / 128) groups older compressed-tensors wrote) would read as groups of 80. */
    int64_t G;
    PZ_CHECK(config_scale_shape(ck, wfull, full, sc, want[0], want[1], &G));
  } else if (sc->ndim != 2 || sc->shape[0] != want[0] || sc->shape[1] < 1 || want[1] % sc->shape[1] ||
             (want[1] / sc->shape[1]) % 8) {
    return pz_error(PZ_ERR_SHAPE, "checkpoint %s: \"%s\" must be [%lld, %lld / group] with a group a multiple of 8; "
                    "check quantization_config.group_size", ck->dir, full, (long long)want[0], (long long)want[1]);
  }
  PZ_CHECK(pz_ck_check_weight_shape(ck, shn, want[0], want[1]));
  memset(s, 0, sizeof *s);
  s->w = w;
  s->rows = want[0];
  s->cols = want[1];
  s->qscale = sc;
  s->group = want[1] / sc->shape[1];
  return PZ_OK;
}

/* An INT4 expert's weight_scale `w` (BF16 / F16 / F32) under the INT4 quantization_config: group G (a multiple of
 * 32) stores [rows, in / G], strategy "channel" [rows, 1], where the graph's scales are [rows, in / 32] (want). The
 * source gathers each stored scale into the 32-column groups it covers (s->rep; 1 at group 32), which gives every
 * weight element the scale it has in the file: the values are unchanged. */
pz_status pz_ck_int4_coarse_scale(pz_checkpoint *ck, const char *full, const pz_st_tensor *w, const int64_t *want,
                                   src *s) {
  const int64_t in = want[1] * 32;
  int64_t G;
  char wname[600]; /* the weight the scales belong to: X.weight_packed beside X.weight_scale */
  snprintf(wname, sizeof wname, "%.*s_packed", (int)(strlen(full) - strlen("_scale")), full);
  PZ_CHECK(config_scale_shape(ck, wname, full, w, want[0], in, &G));
  memset(s, 0, sizeof *s);
  s->w = w;
  s->rows = want[0];
  s->cols = want[1];
  s->rep = G / 32;
  s->srow = in / G;
  s->sgrp = 1;
  return PZ_OK;
}

/* The FP8 e4m3 weight s->w (2-D, s->rows x s->cols set) named `name` ("full" as stored), dequantised to bf16 at
 * load: its "<name>_scale_inv" block scales ("<name>_scale" in compressed-tensors' format, ck->fp8_ct), one per
 * ck->bm x ck->bn block, copied into s->scale as f32. */
pz_status pz_ck_fp8_block_scales(pz_checkpoint *ck, const char *name, const char *full, src *s) {
  char sn[512], sfull[600];
  snprintf(sn, sizeof sn, "%s%s", name, ck->fp8_ct ? "_scale" : "_scale_inv");
  const pz_st_tensor *sc = pz_ck_find(ck, sn, sfull, sizeof sfull);
  int64_t sr = (s->rows + ck->bm - 1) / ck->bm, scn = (s->cols + ck->bn - 1) / ck->bn;
  if (!sc)
    return pz_error(PZ_ERR_DTYPE, "checkpoint %s: FP8 tensor \"%s\" has no \"%s\" block scales; only block-scaled FP8 "
                    "is supported", ck->dir, full, sfull);
  /* F32 as DeepSeek publishes them; BF16 / F16 scales widen to f32 exactly (the routed experts kept as
   * FP8 read them so too), so they are taken as well. */
  if (sc->dtype != PZ_ST_F32 && sc->dtype != PZ_ST_BF16 && sc->dtype != PZ_ST_F16)
    return pz_error(PZ_ERR_DTYPE, "checkpoint %s: \"%s\" has dtype %s; FP8 block scales must be F32, BF16 or F16",
                    ck->dir, sfull, pz_st_dtype_name(sc->dtype));
  if (sc->ndim != 2 || sc->shape[0] != sr || sc->shape[1] != scn) {
    char a[128];
    pz_ck_shape_str(a, sizeof a, sc->ndim, sc->shape);
    return pz_error(PZ_ERR_DTYPE, "checkpoint %s: \"%s\" has shape %s, must be [%lld, %lld] (%lldx%lld blocks of %s); "
                    "check quantization_config.weight_block_size", ck->dir, sfull, a, (long long)sr, (long long)scn,
                    (long long)ck->bm, (long long)ck->bn, full);
  }
  /* An aligned private f32 copy (the scales are 1/16384 of the weight's elements). */
  float *own = malloc(sizeof(float) * (size_t)(sr * scn > 0 ? sr * scn : 1));
  if (!own) return pz_error(PZ_ERR_OOM, "checkpoint: out of memory");
  if (sc->dtype == PZ_ST_F32) {
    memcpy(own, sc->data, sc->nbytes);
  } else {
    for (int64_t k = 0; k < sr * scn; k++) {
      uint16_t h;
      memcpy(&h, (const char *)sc->data + 2 * k, 2);
      own[k] = sc->dtype == PZ_ST_BF16 ? pz_bf16_to_f32(h) : pz_ck_f16_to_f32(h);
    }
  }
  /* NaN, infinite or huge (448 * scale beyond f32) scales make the dequantised weights non-finite
   * and every token id the same: refuse them here, at load. */
  for (int64_t k = 0; k < sr * scn; k++)
    if (!isfinite(own[k]) || fabsf(own[k]) > FLT_MAX / 448.0f) {
      float v = own[k];
      free(own);
      return pz_error(PZ_ERR_IO, "checkpoint %s: \"%s\" block scale [%lld, %lld] is %g, not a finite scale of "
                      "magnitude at most %g; the file is corrupt: re-download or re-quantize it", ck->dir, sfull,
                      (long long)(k / scn), (long long)(k % scn), (double)v, (double)(FLT_MAX / 448.0f));
    }
  s->scale = own;
  s->scols = scn;
  return PZ_OK;
}
