/* The config.json reader's shared pieces (internal to src/model/: the config*.c files and quant_config.c;
 * defined in config_fields.c and quant_config.c). */
#ifndef PZ_MODEL_CONFIG_READ_H
#define PZ_MODEL_CONFIG_READ_H
#include <cjson/cJSON.h>
#include "core/status.h"
#include "model/config.h"

/* The parsed document and its name for messages. */
typedef struct {
  const cJSON *root;
  const char *src;
} reader;

/* PZ_ERR_CONFIG naming field, what it must be and what it is (one line). */
pz_status pz_cfg_type_err(const reader *r, const char *field, const char *want, const cJSON *it);

/* A key given twice in obj: cJSON reads the first, Python's json (transformers) the last; refused
 * (PZ_ERR_CONFIG naming where + the key) rather than silently disagreeing with the reference. */
pz_status pz_cfg_check_duplicates(const reader *r, const cJSON *obj, const char *where);

/* quantization_config of outer (the text_config wrapper's object) when it has one that is not null, else of
 * r's root (text_config, or the whole config when outer is NULL), as transformers and vLLM choose, into out (zeroed first; kind PZ_WQ_NONE when absent or null). Errors: PZ_ERR_CONFIG, one line
 * naming the unsupported field and what is supported (model/config.h pz_config_parse). */
pz_status pz_cfg_parse_quant(const reader *r, const cJSON *outer, pz_quant_config *out);
/* quant_config.c, shared with quant_gptq.c: PZ_ERR_CONFIG "quantization_config.<field> is <got>, which prezero
 * does not support (<supported>)"; got[cap] = a number's value ("%g"), else "not a number", or `absent` when the
 * field is absent or null; and whether a group_size is a multiple of 32 in 32..2^20 (the INT4 kernels' group 32
 * repeated). */
pz_status pz_cfg_quant_unsupported(const reader *r, const char *field, const char *got, const char *supported);
void pz_cfg_number_got(char *got, size_t cap, const cJSON *it, const char *absent);
bool pz_cfg_group_multiple_of_32(const cJSON *gs);
/* quant_gptq.c: a quantization_config `q` whose quant_method is "gptq" into out (zeroed by the caller): symmetric
 * 4-bit GPTQ (AutoGPTQ / GPTQModel / optimum checkpoints: qweight, qzeros, scales, g_idx) read as INT4 with
 * out->gptq set. Errors: PZ_ERR_CONFIG naming the unsupported or malformed field on one line. */
pz_status pz_cfg_parse_gptq(const reader *r, const cJSON *q, pz_quant_config *out);

#endif
