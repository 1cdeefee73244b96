/* Re-evaluates the gate of a recorded `bench ar` JSON with the current rule (core/gate.c),
 * using the calibration recorded in that JSON; prints a markdown table beside the measured
 * fill cost. Usage: regate FILE.json  (build: see bench/ar/build.sh or the comment below)
 *   gcc -std=gnu11 -Iinclude -Isrc bench/ar/regate.c src/core/gate.c -lcjson -o regate */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include "core/gate.h"

static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: regate FILE.json\n"); return 2; }
  FILE *f = fopen(argv[1], "rb");
  if (!f) { fprintf(stderr, "regate: cannot read %s\n", argv[1]); return 1; }
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  cJSON *root = cJSON_Parse(buf);
  if (!root) { fprintf(stderr, "regate: %s is not JSON\n", argv[1]); return 1; }
  const cJSON *g = cJSON_GetObjectItemCaseSensitive(root, "gate_calibration");
  pz_device_desc d;
  pz_device_desc_default(&d);
  d.num_sms = (int)num(g, "num_sms");
  d.ctas_per_sm = (int)num(g, "ctas_per_sm");
  d.fill_bytes_per_us_cta = num(g, "fill_bytes_per_us_cta");
  d.donor_t0_us = num(g, "donor_t0_us");
  d.donor_bytes_per_us = num(g, "donor_bytes_per_us");
  d.fill_penalty_bytes_per_us = num(g, "fill_penalty_bytes_per_us");
  int tp = (int)num(root, "tp");
  int64_t n_total = (int64_t)num(root, "n_total");
  printf("| H | m | fill adds µs (measured) | gate in that run | gate, current rule (max_added_us %.2f) |\n", d.max_added_us);
  printf("|---|---|---|---|---|\n");
  const cJSON *row;
  cJSON_ArrayForEach(row, cJSON_GetObjectItemCaseSensitive(root, "rows")) {
    int64_t H = (int64_t)num(row, "H"), m = (int64_t)num(row, "m");
    const cJSON *gf = cJSON_GetObjectItemCaseSensitive(row, "gate_free");
    printf("| %lld | %lld | %+.2f | %s | %s |\n", (long long)H, (long long)m, num(row, "fill_added_us"),
           cJSON_IsTrue(gf) ? "yes" : "no", pz_is_prezero_free(m, n_total, PZ_F32, H, tp, &d) ? "yes" : "no");
  }
  cJSON_Delete(root);
  return 0;
}
