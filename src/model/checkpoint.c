/* Checkpoint directory (checkpoint.h): opening it (model.safetensors or the index and its shards,
 * config.json's extras), the table of every shard's tensors, lookup and closing. The plans are in
 * checkpoint_plan.c (quantised sources in checkpoint_quant.c and checkpoint_gptq.c), the fill, dtype conversion and load progress bar in
 * checkpoint_fill.c. */
#include "model/checkpoint.h"
#include "model/checkpoint_impl.h"
#include "core/json_tail.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

/* True when shard names a and b name the same path below the directory: equal but for "." components and
 * repeated slashes ("./model-00001-of-00002.safetensors" is "model-00001-of-00002.safetensors"). */
static const char *skip_dot_components(const char *p) { /* past empty and "." components */
  for (;;) {
    if (p[0] == '/') p++;
    else if (p[0] == '.' && (p[1] == '/' || !p[1])) p += 1;
    else return p;
  }
}

static bool same_shard_name(const char *a, const char *b) {
  for (;;) {
    a = skip_dot_components(a);
    b = skip_dot_components(b);
    const size_t na = strcspn(a, "/"), nb = strcspn(b, "/");
    if (na != nb || memcmp(a, b, na)) return false;
    if (!na) return true; /* both at their ends */
    a += na;
    b += nb;
  }
}

/* The shard fname of the index, opened once: an index may name one file by several spellings ("x" and "./x"),
 * or through a link; transformers then reads the same tensors twice, which are one copy here. */
static pz_status add_file(pz_checkpoint *ck, const char *fname, pz_st_file **out) {
  for (int i = 0; i < ck->n_files; i++) {
    const char *p = ck->files[i]->path, *base = p + strlen(ck->dir) + 1;
    if (same_shard_name(base, fname)) { *out = ck->files[i]; return PZ_OK; }
  }
  if (escapes_dir(fname))
    return pz_error(PZ_ERR_IO, "checkpoint %s: the index names shard \"%s\", outside the checkpoint directory (an "
                    "absolute path or a \"..\" component); name shards relative to the directory", ck->dir, fname);
  char *path = join(ck->dir, fname);
  if (!path) return pz_error(PZ_ERR_OOM, "checkpoint %s: out of memory", ck->dir);
  struct stat sb;
  const bool have_id = stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
  for (int i = 0; have_id && i < ck->n_files; i++)
    if (ck->file_ids[i].dev == sb.st_dev && ck->file_ids[i].ino == sb.st_ino) {
      free(path);
      *out = ck->files[i];
      return PZ_OK;
    }
  pz_st_file **nf = realloc(ck->files, sizeof *nf * (size_t)(ck->n_files + 1));
  if (nf) ck->files = nf; /* before any early return: realloc may have moved (and freed) the old block */
  struct pz_ck_file_id *ni = nf ? realloc(ck->file_ids, sizeof *ni * (size_t)(ck->n_files + 1)) : NULL;
  if (ni) ck->file_ids = ni;
  if (!nf || !ni) { free(path); return pz_error(PZ_ERR_OOM, "checkpoint %s: out of memory", ck->dir); }
  pz_status st = pz_st_open(path, &ck->files[ck->n_files]);
  free(path);
  PZ_CHECK(st);
  ck->file_ids[ck->n_files].dev = have_id ? sb.st_dev : 0;
  ck->file_ids[ck->n_files].ino = have_id ? sb.st_ino : 0;
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

void pz_checkpoint_close(pz_checkpoint *ck) {
  if (!ck) return;
  if (ck->printed) fputc('\n', stderr);
  pz_ck_free_plans(ck);
  for (int i = 0; i < ck->n_files; i++) pz_st_close(ck->files[i]);
  free(ck->files);
  free(ck->file_ids);
  free(ck->table);
  free(ck->dir);
  free(ck);
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
