/* What may follow a parsed JSON value in the files prezero reads (config.json, the checkpoint
 * index, a safetensors header): whitespace only. One rule for every reader that parses with
 * cJSON_ParseWithLengthOpts(..., &end, false), which stops after the first value. */
#ifndef PZ_CORE_JSON_TAIL_H
#define PZ_CORE_JSON_TAIL_H
#include <stdbool.h>
#include <stddef.h>

/* The first byte in [p, limit) that is not JSON whitespace (space, \n, \r, \t), or NULL when
 * there is none. A NUL byte ends the text (nul_pads false: nothing after it is looked at) or is
 * padding like whitespace (nul_pads true: safetensors pads its header with them). p NULL: NULL. */
static inline const char *pz_json_tail_bad(const char *p, const char *limit, bool nul_pads) {
  for (; p && p < limit; p++) {
    if (*p == '\0') {
      if (nul_pads) continue;
      return NULL;
    }
    if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t') return p;
  }
  return NULL;
}

#endif
