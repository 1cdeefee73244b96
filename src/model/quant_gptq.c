/* GPTQ quantization_config (quant_method "gptq", as AutoGPTQ, GPTQModel and transformers' GPTQConfig write it) read
 * as INT4 experts: symmetric 4-bit, groups of a multiple of 32 columns (or -1, one per output row), columns in
 * order. The checkpoint's qweight / scales are read transposed into the compressed-tensors layout the INT4 kernels
 * take (checkpoint_quant.c); the symmetric zero point is 8, stored in qzeros as 7 by checkpoint_format "gptq"
 * (AutoGPTQ's zero - 1) and as 8 by "gptq_v2". */
#include <stdio.h>
#include <string.h>
#include "model/config_read.h"

static pz_status gptq_unsupported(const reader *r, const char *field, const char *got, const char *supported) {
  return pz_cfg_quant_unsupported(r, field, got, supported);
}

/* Whether a modules_in_block_to_quantize entry (a module name inside a decoder block, e.g. "mlp.experts.0.up_proj"
 * or Mixtral's "block_sparse_moe.experts.0.w1") names a routed expert's projection. */
static bool names_expert(const char *m) { return strstr(m, "experts.") != NULL; }

pz_status pz_cfg_parse_gptq(const reader *r, const cJSON *q, pz_quant_config *out) {
  const cJSON *bits = cJSON_GetObjectItemCaseSensitive(q, "bits");
  if (!cJSON_IsNumber(bits) || bits->valuedouble != 4) {
    char got[64];
    pz_cfg_number_got(got, sizeof got, bits, "missing");
    return gptq_unsupported(r, "bits", got, "4-bit GPTQ");
  }
  const cJSON *sym = cJSON_GetObjectItemCaseSensitive(q, "sym");
  if (sym && !cJSON_IsNull(sym) && !cJSON_IsTrue(sym)) /* absent: GPTQConfig's default, true */
    return gptq_unsupported(r, "sym", "not true", "symmetric GPTQ: its zero point is 8 for every group");
  /* desc_act true permutes the groups (g_idx) unless static_groups is set (AutoGPTQ's top-level field, GPTQModel's
   * meta.static_groups): the groups are then fixed on the stored column order, g_idx k / group_size, which the
   * loader checks for every module. */
  const cJSON *act = cJSON_GetObjectItemCaseSensitive(q, "desc_act");
  const cJSON *meta = cJSON_GetObjectItemCaseSensitive(q, "meta");
  const bool static_groups = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(q, "static_groups")) ||
                             (cJSON_IsObject(meta) && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(meta, "static_groups")));
  if (act && !cJSON_IsNull(act) && !cJSON_IsFalse(act) && !static_groups)
    return gptq_unsupported(r, "desc_act", "true (activation order: g_idx permutes the groups)",
                            "desc_act false, or true with static_groups: columns and groups in their natural order");
  const cJSON *gs = cJSON_GetObjectItemCaseSensitive(q, "group_size");
  if (!(cJSON_IsNumber(gs) && gs->valuedouble == -1) && !pz_cfg_group_multiple_of_32(gs)) {
    char got[64];
    pz_cfg_number_got(got, sizeof got, gs, "missing");
    return gptq_unsupported(r, "group_size", got, "a group_size that is a multiple of 32 (the INT4 kernels' group), or -1");
  }
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(q, "checkpoint_format");
  const char *f = cJSON_IsString(fmt) ? fmt->valuestring : NULL;
  if (fmt && !cJSON_IsNull(fmt) && !(f && (!strcmp(f, "gptq") || !strcmp(f, "gptq_v2")))) {
    char got[96];
    snprintf(got, sizeof got, f ? "\"%.80s\"" : "not a string", f ? f : "");
    return gptq_unsupported(r, "checkpoint_format", got, "\"gptq\" or \"gptq_v2\"");
  }
  /* GPTQModel's per-module overrides (bits, group size, or "-:" modules left out) */
  const cJSON *dyn = cJSON_GetObjectItemCaseSensitive(q, "dynamic");
  if (dyn && !cJSON_IsNull(dyn) && !(cJSON_IsObject(dyn) && !dyn->child))
    return gptq_unsupported(r, "dynamic", "set (per-module overrides)", "one scheme for every module");
  const cJSON *pd = cJSON_GetObjectItemCaseSensitive(q, "pack_dtype");
  if (pd && !cJSON_IsNull(pd) && !(cJSON_IsString(pd) && !strcmp(pd->valuestring, "int32")))
    return gptq_unsupported(r, "pack_dtype", cJSON_IsString(pd) ? pd->valuestring : "not a string",
                            "\"int32\": eight 4-bit values per word");
  /* Which modules of a block are quantised: all Linear ones, or those listed (lists of names). */
  bool experts = true;
  const cJSON *mb = cJSON_GetObjectItemCaseSensitive(q, "modules_in_block_to_quantize");
  if (mb && !cJSON_IsNull(mb)) {
    if (!cJSON_IsArray(mb))
      return pz_cfg_type_err(r, "quantization_config.modules_in_block_to_quantize", "a list of lists of names", mb);
    experts = false;
    for (const cJSON *l = mb->child; l; l = l->next) {
      if (!cJSON_IsArray(l) && !cJSON_IsString(l))
        return pz_cfg_type_err(r, "quantization_config.modules_in_block_to_quantize", "a list of lists of names", l);
      if (cJSON_IsString(l)) { experts |= names_expert(l->valuestring); continue; }
      for (const cJSON *e = l->child; e; e = e->next) {
        if (!cJSON_IsString(e))
          return pz_cfg_type_err(r, "quantization_config.modules_in_block_to_quantize", "a list of lists of names", e);
        experts |= names_expert(e->valuestring);
      }
    }
  }
  out->kind = PZ_WQ_INT4;
  out->num_bits = 4;
  out->group_size = 32;
  out->stored_group = gs->valuedouble == -1 ? 0 : (int)gs->valuedouble;
  out->gptq = 1;
  out->gptq_zero = f && !strcmp(f, "gptq_v2") ? 8 : 7;
  out->gptq_experts = experts;
  return PZ_OK;
}
