/* Checkpoint directory loader (checkpoint.h): shard table, name mapping of the DeepSeek family
 * and the GQA layouts, fuse / split / shard plans. The fill, dtype conversion and the load
 * progress bar are in checkpoint_fill.c. */
#include "model/checkpoint.h"
#include "model/checkpoint_impl.h"
#include "core/json_tail.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/dtype.h"

static char *join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s", dir, name);
  return p;
}

static int cmp_tensor(const void *a, const void *b) {
  return strcmp((*(const pz_st_tensor *const *)a)->name, (*(const pz_st_tensor *const *)b)->name);
}

const pz_st_tensor *pz_checkpoint_find(const pz_checkpoint *ck, const char *name) {
  if (!ck || !name) return NULL;
  int lo = 0, hi = ck->n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2, c = strcmp(ck->table[mid]->name, name);
    if (!c) return ck->table[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid - 1;
  }
  return NULL;
}

int pz_checkpoint_count(const pz_checkpoint *ck) { return ck ? ck->n : 0; }

/* The tensor `name` (a Hugging Face name without the checkpoint's prefix); full[] gets the name
 * as stored, for messages. */
static const pz_st_tensor *ck_find(const pz_checkpoint *ck, const char *name, char *full, size_t cap) {
  if (ck->lm_inner && !strncmp(name, "model.", 6)) snprintf(full, cap, "model.language_model.%s", name + 6);
  else snprintf(full, cap, "%s%s", ck->prefix, name);
  return pz_checkpoint_find(ck, full);
}

/* The largest config.json or index read (the largest published indexes are a few tens of MB). */
#define PZ_CK_MAX_JSON ((size_t)256 << 20)

/* Reads a whole small file (config.json, the index) into a NUL-terminated buffer. */
static pz_status slurp(const char *path, char **buf, size_t *len) {
  struct stat sb; /* before opening: opening a FIFO blocks until a writer comes (a hang) */
  if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
    return pz_error(PZ_ERR_IO, "checkpoint %s: not a regular file (a directory, FIFO, device or socket); check the "
                    "model directory", path);
  FILE *f = fopen(path, "rb");
  if (!f) return pz_error(PZ_ERR_IO, "checkpoint %s: cannot open (%s); check the model directory", path, strerror(errno));
  const bool big = fstat(fileno(f), &sb) == 0 && (uint64_t)sb.st_size > PZ_CK_MAX_JSON;
  size_t cap = 1 << 16, n = 0;
  char *b = big ? NULL : malloc(cap);
  while (b) {
    n += fread(b + n, 1, cap - n - 1, f);
    if (n < cap - 1) break;
    if (n > PZ_CK_MAX_JSON) { free(b); b = NULL; break; } /* a device or a growing file */
    char *nb = realloc(b, cap * 2);
    if (!nb) { free(b); b = NULL; break; }
    b = nb;
    cap *= 2;
  }
  int err = ferror(f);
  fclose(f);
  if (big || n > PZ_CK_MAX_JSON) {
    free(b);
    return pz_error(PZ_ERR_IO, "checkpoint %s: larger than %zu MiB, too large for a JSON index or config; check the file",
                    path, PZ_CK_MAX_JSON >> 20);
  }
  if (!b) return pz_error(PZ_ERR_OOM, "checkpoint %s: out of memory", path);
  if (err) { free(b); return pz_error(PZ_ERR_IO, "checkpoint %s: read error; check the file", path); }
  b[n] = 0;
  *buf = b;
  *len = n;
  return PZ_OK;
}

/* True when the shard name fname leaves the checkpoint directory: an absolute path or a ".."
 * component ("model..safetensors" is an ordinary name). */
static bool escapes_dir(const char *fname) {
  if (fname[0] == '/') return true;
  for (const char *p = fname;;) {
    size_t n = strcspn(p, "/");
    if (n == 2 && p[0] == '.' && p[1] == '.') return true;
    if (!p[n]) return false;
    p += n + 1;
  }
}

static pz_status add_file(pz_checkpoint *ck, const char *fname, pz_st_file **out) {
  for (int i = 0; i < ck->n_files; i++) {
    const char *p = ck->files[i]->path, *base = p + strlen(ck->dir) + 1;
    if (!strcmp(base, fname)) { *out = ck->files[i]; return PZ_OK; }
  }
  if (escapes_dir(fname))
    return pz_error(PZ_ERR_IO, "checkpoint %s: the index names shard \"%s\", outside the checkpoint directory (an "
                    "absolute path or a \"..\" component); name shards relative to the directory", ck->dir, fname);
  char *path = join(ck->dir, fname);
  pz_st_file **nf = realloc(ck->files, sizeof *nf * (size_t)(ck->n_files + 1));
  if (nf) ck->files = nf; /* before any early return: realloc may have moved (and freed) the old block */
  if (!path || !nf) { free(path); return pz_error(PZ_ERR_OOM, "checkpoint %s: out of memory", ck->dir); }
  pz_status st = pz_st_open(path, &ck->files[ck->n_files]);
  free(path);
  PZ_CHECK(st);
  *out = ck->files[ck->n_files++];
  return PZ_OK;
}

static pz_status read_index(pz_checkpoint *ck, const char *ipath) {
  char *txt;
  size_t len;
  PZ_CHECK(slurp(ipath, &txt, &len));
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(txt, len, &end, false);
  const bool trailing = root && pz_json_tail_bad(end, txt + len, false); /* only whitespace may follow */
  free(txt);
  if (trailing) {
    cJSON_Delete(root);
    return pz_error(PZ_ERR_IO, "checkpoint %s: text after the JSON object; fix or regenerate the index", ipath);
  }
  const cJSON *wm = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
  if (!cJSON_IsObject(wm)) {
    cJSON_Delete(root);
    return pz_error(PZ_ERR_IO, "checkpoint %s: not valid JSON with a \"weight_map\" object; fix or regenerate the index", ipath);
  }
  pz_status st = PZ_OK;
  for (const cJSON *e = wm->child; e && st == PZ_OK; e = e->next) {
    if (!cJSON_IsString(e)) {
      st = pz_error(PZ_ERR_IO, "checkpoint %s: weight_map[\"%s\"] is not a file name; fix the index", ipath, e->string);
      break;
    }
    pz_st_file *f;
    st = add_file(ck, e->valuestring, &f);
    if (st == PZ_OK && !pz_st_find(f, e->string))
      st = pz_error(PZ_ERR_IO, "checkpoint %s: the index puts tensor \"%s\" in %s, which has no such tensor; fix the index",
                    ipath, e->string, e->valuestring);
  }
  cJSON_Delete(root);
  return st;
}

static void read_config_extras(pz_checkpoint *ck) {
  char *path = join(ck->dir, "config.json"), *txt = NULL;
  size_t len;
  struct stat sb;
  if (!path || stat(path, &sb) != 0 || slurp(path, &txt, &len) != PZ_OK) { free(path); return; }
  free(path);
  cJSON *root = cJSON_ParseWithLength(txt, len);
  free(txt);
  if (!root) return; /* pz_config_load reports a malformed config.json */
  const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
  const cJSON *c = cJSON_IsObject(tc) ? tc : root;
  /* A text_config-wrapped config may tie by its outer flag: transformers' save_pretrained of a multimodal
   * model writes the outer true and the inner false, and ties the LM head to the embedding. Either flag lets a
   * missing lm_head.weight be the embedding; a checkpoint that has lm_head.weight is read as it is. */
  ck->tie_word_embeddings = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "tie_word_embeddings")) ||
                            (c != root && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings")));
  const cJSON *q = cJSON_GetObjectItemCaseSensitive(c, "quantization_config");
  if (!q) q = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
  const cJSON *bs = q ? cJSON_GetObjectItemCaseSensitive(q, "weight_block_size") : NULL;
  if (cJSON_IsArray(bs) && cJSON_GetArraySize(bs) == 2) {
    const cJSON *a = cJSON_GetArrayItem(bs, 0), *b = cJSON_GetArrayItem(bs, 1);
    /* Integers in 1..2^20 only (1e300 would overflow the int64 cast); anything else keeps the
     * default, and a scale tensor that then does not match is reported by pz_checkpoint_plan. */
    if (cJSON_IsNumber(a) && cJSON_IsNumber(b) && a->valuedouble >= 1 && b->valuedouble >= 1 &&
        a->valuedouble <= 1048576 && b->valuedouble <= 1048576 && a->valuedouble == (double)(int64_t)a->valuedouble &&
        b->valuedouble == (double)(int64_t)b->valuedouble) {
      ck->bm = (int64_t)a->valuedouble;
      ck->bn = (int64_t)b->valuedouble;
    }
  }
  cJSON_Delete(root);
}

pz_status pz_checkpoint_open(const char *dir, pz_checkpoint **out) {
  if (!dir || !out) return pz_error(PZ_ERR_INVALID_ARG, "pz_checkpoint_open: NULL argument");
  *out = NULL;
  pz_checkpoint *ck = calloc(1, sizeof *ck);
  if (!ck || !(ck->dir = strdup(dir))) { free(ck); return pz_error(PZ_ERR_OOM, "checkpoint %s: out of memory", dir); }
  size_t dl = strlen(ck->dir);
  while (dl > 1 && ck->dir[dl - 1] == '/') ck->dir[--dl] = 0;
  ck->bm = ck->bn = 128;
  ck->progress = -1;
  pz_status st = PZ_OK;
  char *ipath = join(ck->dir, "model.safetensors.index.json"), *one = join(ck->dir, "model.safetensors");
  struct stat sb, sb1;
  /* The order of transformers' from_pretrained for a local directory (modeling_utils,
   * _get_resolved_checkpoint_files): model.safetensors when it is a file (os.path.isfile), else
   * the sharded model.safetensors.index.json; so a directory holding both loads the single file. */
  const bool single = one && stat(one, &sb1) == 0 && S_ISREG(sb1.st_mode);
  if (!ipath || !one) st = pz_error(PZ_ERR_OOM, "checkpoint %s: out of memory", dir);
  else if (!single && stat(ipath, &sb) == 0) st = read_index(ck, ipath);
  else if (!single && stat(one, &sb1) != 0)
    st = pz_error(PZ_ERR_IO, "checkpoint %s: neither model.safetensors nor model.safetensors.index.json is there; "
                  "give --model a Hugging Face checkpoint directory", ck->dir);
  else {
    pz_st_file *f;
    st = add_file(ck, "model.safetensors", &f); /* a model.safetensors that is not a file: refused there */
  }
  free(one);
  free(ipath);
  if (st == PZ_OK) {
    for (int i = 0; i < ck->n_files; i++) ck->n += ck->files[i]->n;
    ck->table = malloc(sizeof *ck->table * (size_t)(ck->n ? ck->n : 1));
    if (!ck->table) st = pz_error(PZ_ERR_OOM, "checkpoint %s: out of memory", dir);
  }
  if (st == PZ_OK) {
    int k = 0;
    for (int i = 0; i < ck->n_files; i++)
      for (int j = 0; j < ck->files[i]->n; j++) ck->table[k++] = &ck->files[i]->t[j];
    qsort(ck->table, (size_t)ck->n, sizeof *ck->table, cmp_tensor);
    for (int i = 1; i < ck->n && st == PZ_OK; i++)
      if (!strcmp(ck->table[i - 1]->name, ck->table[i]->name))
        st = pz_error(PZ_ERR_IO, "checkpoint %s: tensor \"%s\" appears in both %s and %s; remove one copy", ck->dir,
                      ck->table[i]->name, ck->table[i - 1]->file->path, ck->table[i]->file->path);
  }
  if (st != PZ_OK) { pz_checkpoint_close(ck); return st; }
  read_config_extras(ck);
  *out = ck;
  return PZ_OK;
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

void pz_checkpoint_close(pz_checkpoint *ck) {
  if (!ck) return;
  if (ck->printed) fputc('\n', stderr);
  pz_ck_free_plans(ck);
  for (int i = 0; i < ck->n_files; i++) pz_st_close(ck->files[i]);
  free(ck->files);
  free(ck->table);
  free(ck->dir);
  free(ck);
}

/* ------------------------------------------------------------------ plans */

static void shape_str(char *buf, size_t cap, int nd, const int64_t *ne) {
  size_t o = (size_t)snprintf(buf, cap, "[");
  for (int d = 0; d < nd && o < cap; d++) o += (size_t)snprintf(buf + o, cap - o, "%s%lld", d ? ", " : "", (long long)ne[d]);
  if (o < cap) snprintf(buf + o, cap - o, "]");
}

/* INT4 scales must be BF16: another dtype would be rounded on the way in. */
static pz_status int4_scale_dtype_err(const pz_checkpoint *ck, const char *full, const pz_st_tensor *sc) {
  return pz_error(PZ_ERR_DTYPE, "checkpoint %s: \"%s\" is %s; prezero reads INT4 scales in BF16 (the dtype of the "
                  "published Kimi checkpoints), converting them would round them", ck->dir, full, pz_st_dtype_name(sc->dtype));
}

/* "X.weight_shape" (shn) of a pack-quantized tensor: present, an I64 or I32 [2] holding [rows, cols]. */
static pz_status check_weight_shape(const pz_checkpoint *ck, const char *shn, int64_t rows, int64_t cols) {
  char full[600];
  const pz_st_tensor *sh = ck_find(ck, shn, full, sizeof full);
  int64_t shape[2] = {0, 0};
  if (sh && (sh->dtype == PZ_ST_I64 || sh->dtype == PZ_ST_I32) && sh->numel == 2)
    for (int d = 0; d < 2; d++) {
      if (sh->dtype == PZ_ST_I64) memcpy(&shape[d], (const char *)sh->data + 8 * d, 8);
      else { int32_t v; memcpy(&v, (const char *)sh->data + 4 * d, 4); shape[d] = v; }
    }
  if (!sh || shape[0] != rows || shape[1] != cols)
    return pz_error(PZ_ERR_SHAPE, "checkpoint %s: \"%s\" must be an integer [2] holding [%lld, %lld]%s", ck->dir, full,
                    (long long)rows, (long long)cols, sh ? "" : " (it is missing)");
  return PZ_OK;
}

/* INT4 source read as values: `name` = "X.weight" is absent, "X.weight_packed" int32 [rows, cols/8],
 * "X.weight_scale" bf16 [rows, cols/group] and "X.weight_shape" [rows, cols] are there (compressed-tensors
 * pack-quantized; the group follows from the scale's shape). */
static pz_status get_int4_values(pz_checkpoint *ck, const char *name, const char *for_t, int nd, const int64_t *want, src *s) {
  char base[512], pn[560], sn[560], shn[560], full[600];
  snprintf(base, sizeof base, "%.*s", (int)(strlen(name) - strlen(".weight")), name);
  snprintf(pn, sizeof pn, "%s.weight_packed", base);
  snprintf(sn, sizeof sn, "%s.weight_scale", base);
  snprintf(shn, sizeof shn, "%s.weight_shape", base);
  const pz_st_tensor *w = ck_find(ck, pn, full, sizeof full);
  if (nd != 2 || want[1] % 8)
    return pz_error(PZ_ERR_SHAPE, "checkpoint %s: INT4 tensor \"%s\" (for %s) must be 2-D with columns a multiple of 8",
                    ck->dir, full, for_t);
  if (w->dtype != PZ_ST_I32 || w->ndim != 2 || w->shape[0] != want[0] || w->shape[1] != want[1] / 8)
    return pz_error(PZ_ERR_SHAPE, "checkpoint %s: \"%s\" must be I32 [%lld, %lld] (eight 4-bit values per word of the "
                    "[%lld, %lld] weight), got %s; the checkpoint does not match its config.json", ck->dir, full,
                    (long long)want[0], (long long)(want[1] / 8), (long long)want[0], (long long)want[1],
                    pz_st_dtype_name(w->dtype));
  char wfull[600];
  snprintf(wfull, sizeof wfull, "%s", full); /* weight_packed's name as stored */
  const pz_st_tensor *sc = ck_find(ck, sn, full, sizeof full);
  if (!sc)
    return pz_error(PZ_ERR_NOT_FOUND, "checkpoint %s: INT4 tensor \"%s\" has no scales \"%s\"; pack-quantized weights need "
                    "their weight_scale", ck->dir, wfull, full);
  if (sc->dtype != PZ_ST_BF16) return int4_scale_dtype_err(ck, full, sc);
  if (sc->ndim != 2 || sc->shape[0] != want[0] || sc->shape[1] < 1 || want[1] % sc->shape[1] ||
      (want[1] / sc->shape[1]) % 8)
    return pz_error(PZ_ERR_SHAPE, "checkpoint %s: \"%s\" must be BF16 [%lld, %lld / group] with a group a multiple of 8; "
                    "check quantization_config.group_size", ck->dir, full, (long long)want[0], (long long)want[1]);
  PZ_CHECK(check_weight_shape(ck, shn, want[0], want[1]));
  memset(s, 0, sizeof *s);
  s->w = w;
  s->rows = want[0];
  s->cols = want[1];
  s->qscale = sc;
  s->group = want[1] / sc->shape[1];
  return PZ_OK;
}

/* Finds `name`, checks its shape == want[nd] and its dtype, and fills a source view. dst_dtype
 * i32 (packed INT4 words) and u8 (e4m3 bytes) take the tensor as stored. */
static pz_status get_src(pz_checkpoint *ck, const char *name, const char *for_t, int nd, const int64_t *want,
                         pz_dtype dst_dtype, src *s) {
  char full[600], alt[600], altf[640];
  const pz_st_tensor *w = ck_find(ck, name, full, sizeof full);
  const size_t nl = strlen(name);
  if (!w && nl > 7 && !strcmp(name + nl - 7, ".weight") && (dst_dtype == PZ_BF16 || dst_dtype == PZ_F32)) {
    snprintf(alt, sizeof alt, "%s_packed", name);
    if (ck_find(ck, alt, altf, sizeof altf)) return get_int4_values(ck, name, for_t, nd, want, s);
  }
  if (!w) {
    if (nl > 14 && !strcmp(name + nl - 14, ".weight_packed")) {
      snprintf(alt, sizeof alt, "%.*s", (int)(nl - 7), name); /* X.weight */
      const pz_st_tensor *a = ck_find(ck, alt, altf, sizeof altf);
      if (a)
        return pz_error(PZ_ERR_DTYPE, "checkpoint %s: config.json's quantization_config makes %s INT4 but the checkpoint "
                        "stores \"%s\" %s; fix quantization_config (its ignore list) or the checkpoint", ck->dir,
                        for_t, altf, a->dtype == PZ_ST_F8_E4M3 ? "as FP8 (F8_E4M3)" : "unquantised");
    }
    if (dst_dtype == PZ_U8 && nl > 7 && !strcmp(name + nl - 7, ".weight")) {
      snprintf(alt, sizeof alt, "%s_packed", name); /* X.weight_packed */
      if (ck_find(ck, alt, altf, sizeof altf))
        return pz_error(PZ_ERR_DTYPE, "checkpoint %s: config.json's quantization_config is fp8 (e4m3 weights for %s) but "
                        "the checkpoint stores \"%s\", compressed-tensors INT4; fix quantization_config or the checkpoint",
                        ck->dir, for_t, altf);
    }
    return pz_error(PZ_ERR_NOT_FOUND, "checkpoint %s: tensor \"%s\" (for %s) is missing; the checkpoint does not match its "
                    "config.json", ck->dir, full, for_t);
  }
  bool same = w->ndim == nd;
  for (int d = 0; same && d < nd; d++) same = w->shape[d] == want[d];
  if (!same) {
    char a[128], b[128];
    shape_str(a, sizeof a, w->ndim, w->shape);
    shape_str(b, sizeof b, nd, want);
    return pz_error(PZ_ERR_SHAPE, "checkpoint %s: tensor \"%s\" has shape %s, config.json implies %s; the checkpoint does "
                    "not match its config.json", ck->dir, full, a, b);
  }
  if (nl > 13 && !strcmp(name + nl - 13, ".weight_scale") && w->dtype != PZ_ST_BF16) /* as get_int4_values */
    return int4_scale_dtype_err(ck, full, w);
  memset(s, 0, sizeof *s);
  s->w = w;
  s->cols = nd ? want[nd - 1] : 1;
  s->rows = s->cols ? w->numel / s->cols : 0;
  if (dst_dtype == PZ_I32 || dst_dtype == PZ_U8) {
    const pz_st_dtype need = dst_dtype == PZ_I32 ? PZ_ST_I32 : PZ_ST_F8_E4M3;
    if (w->dtype != need)
      return pz_error(PZ_ERR_DTYPE, "checkpoint %s: tensor \"%s\" has dtype %s; %s needs %s (%s)", ck->dir, full,
                      pz_st_dtype_name(w->dtype), for_t, pz_st_dtype_name(need),
                      dst_dtype == PZ_I32 ? "compressed-tensors pack-quantized words" : "FP8 e4m3 experts kept as FP8");
    if (dst_dtype == PZ_I32 && nd == 2 && nl > 14 && !strcmp(name + nl - 14, ".weight_packed")) {
      char shn[600]; /* its weight_shape, as for the experts dequantised at load */
      snprintf(shn, sizeof shn, "%.*s.weight_shape", (int)(nl - 14), name);
      PZ_CHECK(check_weight_shape(ck, shn, want[0], want[1] * 8));
    }
    s->raw = true;
    return PZ_OK;
  }
  if (w->dtype == PZ_ST_BF16 || w->dtype == PZ_ST_F32 || w->dtype == PZ_ST_F16) return PZ_OK;
  if (w->dtype == PZ_ST_F8_E4M3 && dst_dtype == PZ_BF16 && nd == 2) {
    char sn[512], sfull[600];
    snprintf(sn, sizeof sn, "%s_scale_inv", name);
    const pz_st_tensor *sc = ck_find(ck, sn, sfull, sizeof sfull);
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
      shape_str(a, sizeof a, sc->ndim, sc->shape);
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
  return pz_error(PZ_ERR_DTYPE, "checkpoint %s: tensor \"%s\" has dtype %s; supported: BF16, F16, F32, F8_E4M3 with "
                  "weight_scale_inv block scales for 2-D bf16 weights, I32 pack-quantized INT4 (weight_packed + "
                  "weight_scale)", ck->dir, full, pz_st_dtype_name(w->dtype));
}

static pz_status alloc_src(plan *p, int n) {
  p->n_src = n;
  if (!(p->s = calloc((size_t)n, sizeof *p->s))) return pz_error(PZ_ERR_OOM, "checkpoint: out of memory");
  return PZ_OK;
}

/* qkv_proj weight [(heads + 2*kvh)*d, H] bf16 or bias [(heads + 2*kvh)*d] f32 of a GQA layer
 * from q_proj / k_proj / v_proj (checkpoint.h). */
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
  const bool legacy_gate = ck_find(ck, hf, f1, sizeof f1) || !ck_find(ck, hf2, f2, sizeof f2);
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
    legacy |= ck_find(ck, hf, f1, sizeof f1) != NULL;
    mlp_names |= ck_find(ck, hf2, f2, sizeof f2) != NULL;
  }
  snprintf(hf3, sizeof hf3, "model.layers.%d.mlp.experts.gate_up_proj", L);
  legacy = legacy || (!mlp_names && !ck_find(ck, hf3, f3, sizeof f3));
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
    if (!ck_find(ck, hf, f1, sizeof f1) && ck_find(ck, hf2, f2, sizeof f2)) {
      /* transformers >= 5 layout: gate_up_proj [E, 2I, H] (gate rows first), down_proj [E, H, I]. */
      p->kind = PLAN_EXPERTS_FUSED;
      p->n_src = 1;
      p->split = down ? full[1] : 2 * full[1];
      p->nope = up ? full[1] : 0;
      if (!(p->s = calloc(1, sizeof *p->s))) return pz_error(PZ_ERR_OOM, "checkpoint: out of memory");
      return get_src(ck, hf2, nm, 3, (int64_t[]){full[0], p->split, full[2]}, t->dtype, &p->s[0]);
    }
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
    if (!ck_find(ck, hf, f1, sizeof f1) && (ck->tie_word_embeddings || c->tie_word_embeddings))
      snprintf(hf, sizeof hf, "model.embed_tokens.weight");
  } else {
    snprintf(hf, sizeof hf, "model.%s", nm);
  }
  return get_src(ck, hf, nm, nd, full, t->dtype, &p->s[0]);
}

pz_status pz_checkpoint_plan(pz_checkpoint *ck, const pz_model_config *c, const pz_graph *g) {
  if (!ck || !c || !g) return pz_error(PZ_ERR_INVALID_ARG, "pz_checkpoint_plan: NULL argument");
  pz_ck_free_plans(ck);
  ck->plans = calloc((size_t)(g->n_tensors ? g->n_tensors : 1), sizeof *ck->plans);
  if (!ck->plans) return pz_error(PZ_ERR_OOM, "checkpoint: out of memory");
  ck->n_plans = g->n_tensors;
  ck->tp = g->info.tp;
  /* Kimi-K2.5 keeps the text model under "language_model." (its config wraps it in text_config). */
  ck->prefix[0] = 0;
  ck->lm_inner = false;
  if (!pz_checkpoint_find(ck, "model.embed_tokens.weight") && pz_checkpoint_find(ck, "language_model.model.embed_tokens.weight"))
    snprintf(ck->prefix, sizeof ck->prefix, "language_model.");
  else if (!pz_checkpoint_find(ck, "model.embed_tokens.weight") &&
           pz_checkpoint_find(ck, "model.language_model.embed_tokens.weight"))
    ck->lm_inner = true; /* and lm_head.weight (or the tied embedding) as it is */
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
   * (asymmetric, actorder "group"), whatever the config says: the weights would be read wrongly. */
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
      return pz_error(PZ_ERR_UNSUPPORTED, "checkpoint %s: tensor \"%s\" holds %s, which prezero's INT4 experts do not "
                      "have (symmetric, group 32, columns in order); the weights would be read wrongly, so it is not loaded",
                      ck->dir, nm, layout);
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

pz_status pz_checkpoint_load_config(const char *dir, pz_model_config *out) {
  if (!dir || !out) return pz_error(PZ_ERR_INVALID_ARG, "pz_checkpoint_load_config: NULL argument");
  struct stat sb;
  if (stat(dir, &sb) != 0)
    return pz_error(PZ_ERR_IO, "checkpoint %s: does not exist (%s); give --model the path of a Hugging Face checkpoint "
                    "directory", dir, strerror(errno));
  if (!S_ISDIR(sb.st_mode)) {
    /* Most often its config.json or a weights file: name the folder that holds it. */
    const char *slash = strrchr(dir, '/');
    int n = slash ? (slash == dir ? 1 : (int)(slash - dir)) : 1;
    return pz_error(PZ_ERR_IO, "checkpoint %s: is a file, not a directory; pass its folder (--model %.*s)", dir, n,
                    slash ? dir : ".");
  }
  char *path = join(dir, "config.json");
  if (!path) return pz_error(PZ_ERR_OOM, "checkpoint %s: out of memory", dir);
  if (stat(path, &sb) != 0) {
    free(path);
    return pz_error(PZ_ERR_IO, "checkpoint %s: no config.json there; give --model a Hugging Face checkpoint directory", dir);
  }
  if (!S_ISREG(sb.st_mode)) {
    free(path);
    return pz_error(PZ_ERR_IO, "checkpoint %s: its config.json is not a regular file (a directory, FIFO, device or "
                    "socket); replace it with the model's config.json file", dir);
  }
  pz_status st = pz_config_load(path, out);
  free(path);
  return st;
}

pz_status pz_checkpoint_open_planned(const char *dir, const pz_model_config *c, const pz_graph *g,
                                     pz_checkpoint **out) {
  if (!out) return pz_error(PZ_ERR_INVALID_ARG, "pz_checkpoint_open_planned: NULL argument");
  PZ_CHECK(pz_checkpoint_open(dir, out));
  pz_status st = pz_checkpoint_plan(*out, c, g);
  if (st != PZ_OK) {
    pz_checkpoint_close(*out);
    *out = NULL;
  }
  return st;
}
