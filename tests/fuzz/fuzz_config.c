/* libFuzzer target: pz_config_parse (config.json, incl. text_config / quantization_config /
 * rope_scaling). Seed corpus: copies of configs/ and tests/data/golden/ config.json files in a scratch folder (libFuzzer writes into it). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "model/config.h"
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  pz_model_config c;
  pz_status st = pz_config_parse((const char *)data, size, "fuzz", &c);
  if (st != PZ_OK && !pz_last_error()[0]) abort();
  if (st == PZ_OK) (void)pz_quant_applies(&c.quant, "model.layers.1.mlp.experts.0.down_proj");
  return 0;
}
