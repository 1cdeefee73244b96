/* GEMM kernel choices and the tuner table (backend/gemm_table.h): flavour names, the JSON reader
 * with its range checks, look-up, and the writer. Host C only; cJSON. */
#include "backend/gemm_table.h"
#include "backend/tables/gemm_tables.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const flavour_names[PZ_GEMM_FLAVOUR_COUNT] = {"auto", "atomic", "zero", "memset",
                                                                  "fullk", "serial", "cublas"};

const char *pz_gemm_flavour_name(pz_gemm_flavour f) {
  return (int)f >= 0 && f < PZ_GEMM_FLAVOUR_COUNT ? flavour_names[f] : "?";
}

pz_gemm_flavour pz_gemm_flavour_parse(const char *s) {
  if (!s) return PZ_GEMM_FLAVOUR_COUNT;
  if (s[0] >= '0' && s[0] <= '6' && s[1] == 0) return (pz_gemm_flavour)(s[0] - '0');
  for (int i = 0; i < PZ_GEMM_FLAVOUR_COUNT; i++)
    if (!strcmp(s, flavour_names[i])) return (pz_gemm_flavour)i;
  return PZ_GEMM_FLAVOUR_COUNT;
}

int pz_tuner_m_bucket(int m) {
  int b = 1;
  while (b < m) b <<= 1;
  return b;
}

static void mkdirs(const char *path) {
  char tmp[1024];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      mkdir(tmp, 0755);
      *p = '/';
    }
  mkdir(tmp, 0755);
}

static bool cfg_in_range(const pz_gemm_config *c) {
  return c->splits >= 1 && c->splits <= 4096 && c->wt >= 1 && c->wt <= 8 && c->warps >= 1 && c->warps <= 32 &&
         c->wn >= 0 && c->wn <= 4 && c->wn != 2 /* the removed staged kernel */ && (c->bn == 0 || (c->wn == 3 && pz_gemm_bn_ok(c->bn, c->wt)));
}

/* An integer JSON number in [lo, hi], else false (fractions, NaN, huge values refused). */
static bool json_int(const cJSON *v, double lo, double hi, int *out) {
  if (!cJSON_IsNumber(v)) return false;
  double d = v->valuedouble;
  if (!(d >= lo && d <= hi) || d != (double)(int)d) return false;
  *out = (int)d;
  return true;
}

static int json_int_or(const cJSON *v, int dflt) {
  int x;
  if (!v) return dflt;
  return json_int(v, -1e9, 1e9, &x) ? x : -1; /* present but not an integer: out of every range */
}

pz_status pz_tuner_table_load_text(pz_tuner_table *t, const char *text, size_t len, int *dropped) {
  int drop = 0;
  if (dropped) *dropped = 0;
  cJSON *root = text ? cJSON_ParseWithLength(text, len) : NULL;
  if (!root) return PZ_OK;
  const cJSON *dev = cJSON_GetObjectItem(root, "device"), *sm = cJSON_GetObjectItem(root, "sm_count");
  const cJSON *ents = cJSON_GetObjectItem(root, "entries");
  int smv = 0;
  if (!cJSON_IsString(dev) || strcmp(dev->valuestring, t->device) || !json_int(sm, 1, 1e6, &smv) ||
      smv != t->sm_count || !cJSON_IsArray(ents)) {
    cJSON_Delete(root);
    return PZ_OK;
  }
  const cJSON *it;
  cJSON_ArrayForEach(it, ents) {
    pz_tuner_entry e;
    memset(&e, 0, sizeof e);
    if (!json_int(cJSON_GetObjectItem(it, "m"), 1, 256, &e.m_bucket) || (e.m_bucket & (e.m_bucket - 1)) ||
        !json_int(cJSON_GetObjectItem(it, "n"), 64, 1 << 20, &e.n) || e.n % 64 ||
        !json_int(cJSON_GetObjectItem(it, "k"), 64, 1 << 20, &e.k) || e.k % 64) {
      drop++;
      continue;
    }
    const cJSON *fl = cJSON_GetObjectItem(it, "flavours");
    bool have[PZ_GEMM_FLAVOUR_COUNT] = {false};
    for (int f = 1; f < PZ_GEMM_FLAVOUR_COUNT; f++) {
      const cJSON *o = cJSON_IsObject(fl) ? cJSON_GetObjectItem(fl, pz_gemm_flavour_name((pz_gemm_flavour)f)) : NULL;
      if (!o) continue;
      const cJSON *us = cJSON_GetObjectItem(o, "us");
      pz_gemm_config c = {.flavour = (pz_gemm_flavour)f,
                          .splits = json_int_or(cJSON_GetObjectItem(o, "splits"), 0),
                          .wt = json_int_or(cJSON_GetObjectItem(o, "wt"), 1),
                          .warps = json_int_or(cJSON_GetObjectItem(o, "warps"), 8),
                          .wn = json_int_or(cJSON_GetObjectItem(o, "wn"), 0),
                          .bn = json_int_or(cJSON_GetObjectItem(o, "bn"), 0)};
      double u = cJSON_IsNumber(us) ? us->valuedouble : 0;
      if (!cfg_in_range(&c) || !(u >= 0 && u < 1e12)) {
        drop++;
        continue;
      }
      e.cfg[f] = c;
      e.us[f] = u;
      have[f] = true;
    }
    const cJSON *bn = cJSON_GetObjectItem(it, "best_nozero"), *bz = cJSON_GetObjectItem(it, "best_zero");
    e.best_nozero = cJSON_IsString(bn) ? pz_gemm_flavour_parse(bn->valuestring) : PZ_GEMM_AUTO;
    e.best_zero = cJSON_IsString(bz) ? pz_gemm_flavour_parse(bz->valuestring) : PZ_GEMM_AUTO;
    if (e.best_nozero >= PZ_GEMM_FLAVOUR_COUNT || !have[e.best_nozero]) e.best_nozero = PZ_GEMM_AUTO;
    if (e.best_zero >= PZ_GEMM_FLAVOUR_COUNT || !have[e.best_zero]) e.best_zero = PZ_GEMM_AUTO;
    pz_status st = pz_tuner_put(t, &e);
    if (st != PZ_OK) {
      cJSON_Delete(root);
      return st;
    }
  }
  cJSON_Delete(root);
  if (dropped) *dropped = drop;
  return PZ_OK;
}

pz_status pz_tuner_table_init(pz_tuner_table *t, const char *device, int sm_count, const char *cache_dir,
                              int builtin) {
  memset(t, 0, sizeof *t);
  snprintf(t->device, sizeof t->device, "%s", device);
  t->sm_count = sm_count;
  snprintf(t->source, sizeof t->source, "none");
  char dir[700], key[256];
  snprintf(dir, sizeof dir, "%s", cache_dir && *cache_dir ? cache_dir : "./.cache/prezero");
  pz_gemm_table_key(key, sizeof key, device, sm_count);
  snprintf(t->path, sizeof t->path, "%s/%s.json", dir, key);
  FILE *f = fopen(t->path, "rb");
  pz_status st = PZ_OK;
  if (f) {
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = sz > 0 ? malloc((size_t)sz + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)sz, f) == (size_t)sz) {
      buf[sz] = 0;
      st = pz_tuner_table_load_text(t, buf, (size_t)sz, NULL);
    }
    free(buf);
    fclose(f);
    if (st == PZ_OK && t->count > 0) snprintf(t->source, sizeof t->source, "cache");
  }
  /* No usable cache file: the table built into the library for this device, if any.
   * PREZERO_GEMM_BUILTIN=0 ignores it (the heuristic then decides). */
  if (st == PZ_OK && t->count == 0 && builtin) {
    const char *text = pz_gemm_builtin_table(device, sm_count);
    if (text) {
      st = pz_tuner_table_load_text(t, text, strlen(text), NULL);
      if (st == PZ_OK && t->count > 0) snprintf(t->source, sizeof t->source, "built-in");
    }
  }
  return st;
}

void pz_tuner_table_free(pz_tuner_table *t) {
  free(t->e);
  t->e = NULL;
  t->count = t->cap = 0;
}

const pz_tuner_entry *pz_tuner_lookup(const pz_tuner_table *t, int m, int n, int k) {
  int b = pz_tuner_m_bucket(m);
  for (int i = 0; i < t->count; i++)
    if (t->e[i].m_bucket == b && t->e[i].n == n && t->e[i].k == k) return &t->e[i];
  return NULL;
}

pz_status pz_tuner_put(pz_tuner_table *t, const pz_tuner_entry *e) {
  for (int i = 0; i < t->count; i++)
    if (t->e[i].m_bucket == e->m_bucket && t->e[i].n == e->n && t->e[i].k == e->k) {
      t->e[i] = *e;
      return PZ_OK;
    }
  if (t->count == t->cap) {
    int nc = t->cap ? 2 * t->cap : 64;
    pz_tuner_entry *ne = realloc(t->e, (size_t)nc * sizeof *ne);
    if (!ne) return pz_error(PZ_ERR_OOM, "tuner: table growth");
    t->e = ne;
    t->cap = nc;
  }
  t->e[t->count++] = *e;
  return PZ_OK;
}

cJSON *pz_tuner_to_json(const pz_tuner_table *t) {
  cJSON *root = cJSON_CreateObject();
  bool ok = root && cJSON_AddStringToObject(root, "device", t->device) &&
            cJSON_AddNumberToObject(root, "sm_count", t->sm_count);
  cJSON *arr = ok ? cJSON_AddArrayToObject(root, "entries") : NULL;
  ok = ok && arr;
  for (int i = 0; ok && i < t->count; i++) {
    const pz_tuner_entry *e = &t->e[i];
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(arr, o)) {
      cJSON_Delete(o);
      ok = false;
      break;
    }
    ok = cJSON_AddNumberToObject(o, "m", e->m_bucket) && cJSON_AddNumberToObject(o, "n", e->n) &&
         cJSON_AddNumberToObject(o, "k", e->k);
    cJSON *fl = ok ? cJSON_AddObjectToObject(o, "flavours") : NULL;
    ok = ok && fl;
    for (int f = 1; ok && f < PZ_GEMM_FLAVOUR_COUNT; f++) {
      if (e->cfg[f].splits <= 0) continue;
      cJSON *c = cJSON_AddObjectToObject(fl, pz_gemm_flavour_name((pz_gemm_flavour)f));
      ok = c && cJSON_AddNumberToObject(c, "splits", e->cfg[f].splits) &&
           cJSON_AddNumberToObject(c, "wt", e->cfg[f].wt) && cJSON_AddNumberToObject(c, "warps", e->cfg[f].warps) &&
           cJSON_AddNumberToObject(c, "wn", e->cfg[f].wn) &&
           (e->cfg[f].bn == 0 || cJSON_AddNumberToObject(c, "bn", e->cfg[f].bn)) && cJSON_AddNumberToObject(c, "us", e->us[f]);
    }
    ok = ok && cJSON_AddStringToObject(o, "best_nozero", pz_gemm_flavour_name(e->best_nozero)) &&
         cJSON_AddStringToObject(o, "best_zero", pz_gemm_flavour_name(e->best_zero));
  }
  if (!ok) {
    cJSON_Delete(root);
    return NULL;
  }
  return root;
}

pz_status pz_tuner_save(const pz_tuner_table *t) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", t->path);
  char *slash = strrchr(dir, '/');
  if (slash) {
    *slash = 0;
    mkdirs(dir);
  }
  cJSON *root = pz_tuner_to_json(t);
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  if (!text) return pz_error(PZ_ERR_OOM, "tuner: JSON print");
  FILE *f = fopen(t->path, "wb");
  if (!f) {
    free(text);
    return pz_error(PZ_ERR_IO, "tuner: cannot write %s: %s", t->path, strerror(errno));
  }
  size_t len = strlen(text);
  int ok = fwrite(text, 1, len, f) == len;
  ok &= fclose(f) == 0;
  free(text);
  return ok ? PZ_OK : pz_error(PZ_ERR_IO, "tuner: short write to %s", t->path);
}

