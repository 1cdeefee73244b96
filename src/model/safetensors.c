/* safetensors reader (mmap + cJSON header) and writer; see safetensors.h for the format and
 * the checks made on every header. */
#include "core/json_tail.h"
#include "core/utf8.h"
#include "model/safetensors.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct { const char *name; size_t bits; } st_types[PZ_ST_DTYPE_COUNT] = {
    [PZ_ST_BOOL] = {"BOOL", 8},    [PZ_ST_U8] = {"U8", 8},    [PZ_ST_I8] = {"I8", 8},
    [PZ_ST_F8_E4M3] = {"F8_E4M3", 8}, [PZ_ST_F8_E5M2] = {"F8_E5M2", 8},
    [PZ_ST_I16] = {"I16", 16},     [PZ_ST_U16] = {"U16", 16}, [PZ_ST_F16] = {"F16", 16},
    [PZ_ST_BF16] = {"BF16", 16},   [PZ_ST_I32] = {"I32", 32}, [PZ_ST_U32] = {"U32", 32},
    [PZ_ST_F32] = {"F32", 32},     [PZ_ST_F64] = {"F64", 64}, [PZ_ST_I64] = {"I64", 64},
    [PZ_ST_U64] = {"U64", 64},     [PZ_ST_F4] = {"F4", 4},    [PZ_ST_F6_E2M3] = {"F6_E2M3", 6},
    [PZ_ST_F6_E3M2] = {"F6_E3M2", 6}, [PZ_ST_F8_E8M0] = {"F8_E8M0", 8}, [PZ_ST_C64] = {"C64", 64},
    [PZ_ST_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8}, [PZ_ST_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8},
};

const char *pz_st_dtype_name(pz_st_dtype t) { return t < PZ_ST_DTYPE_COUNT ? st_types[t].name : "?"; }
size_t pz_st_dtype_bits(pz_st_dtype t) { return t < PZ_ST_DTYPE_COUNT ? st_types[t].bits : 0; }
size_t pz_st_dtype_size(pz_st_dtype t) { return t < PZ_ST_DTYPE_COUNT && st_types[t].bits % 8 == 0 ? st_types[t].bits / 8 : 0; }

/* Header sizes above this are rejected as corrupt (real headers are a few MB at most). */
#define PZ_ST_MAX_HEADER ((uint64_t)256 << 20)

static int cmp_name(const void *a, const void *b) {
  return strcmp(((const pz_st_tensor *)a)->name, ((const pz_st_tensor *)b)->name);
}

/* By data start, then end. */
static int cmp_range(const void *a, const void *b) {
  const pz_st_tensor *x = a, *y = b;
  const char *xs = x->data, *ys = y->data;
  if (xs != ys) return xs < ys ? -1 : 1;
  return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* Index (among the top-level members, in order) of the first key of the JSON object js[0, n)
 * holding a NUL (a \u0000 escape or a raw 0 byte), or -1. cJSON cuts such a key at the NUL, so
 * it cannot be seen in the parsed name. js has been parsed by cJSON already (it is valid). */
static int key_with_nul(const char *js, size_t n) {
  int depth = 0, k = -1;
  bool key = false;
  for (size_t i = 0; i < n; i++) {
    char c = js[i];
    if (c == '"') {
      bool nul = false;
      for (i++; i < n && js[i] != '"'; i++) {
        if (js[i] == 0) nul = true;
        if (js[i] == '\\') { /* skip the escaped character; \u0000 is a NUL */
          if (i + 5 < n && !memcmp(js + i + 1, "u0000", 5)) nul = true;
          i++;
        }
      }
      if (key) {
        k++;
        if (nul) return k;
      }
      key = false;
    } else if (c == '{' || c == '[') {
      depth++;
      key = c == '{' && depth == 1;
    } else if (c == '}' || c == ']') {
      depth--;
    } else if (c == ',') {
      key = depth == 1;
    }
  }
  return -1;
}

/* Non-negative integer JSON number (exact in a double). */
static int get_u64(const cJSON *it, uint64_t *v) {
  if (!cJSON_IsNumber(it)) return 0;
  double d = it->valuedouble;
  if (d < 0 || d != floor(d) || d > 9.0e15) return 0;
  *v = (uint64_t)d;
  return 1;
}

static pz_status parse_entry(pz_st_file *f, const cJSON *e, size_t data_size, pz_st_tensor *t) {
  const char *nm = e->string;
  if (!nm[0])
    return pz_error(PZ_ERR_IO, "safetensors %s: a tensor has an empty name; the file is corrupt (every tensor needs "
                    "a name)", f->path);
  for (size_t i = 0; nm[i]; i++)
    if ((unsigned char)nm[i] < 0x20 || nm[i] == 0x7f)
      return pz_error(PZ_ERR_IO, "safetensors %s: tensor name \"%.*s...\" has control character 0x%02x at byte %zu; "
                      "the file is corrupt (tensor names are printable)", f->path, (int)i, nm,
                      (unsigned)(unsigned char)nm[i], i);
  const long bad = pz_utf8_bad_at(nm);
  if (bad >= 0)
    return pz_error(PZ_ERR_IO, "safetensors %s: tensor name \"%.*s...\" is not valid UTF-8 at byte %ld; the file is "
                    "corrupt (safetensors names are UTF-8)", f->path, (int)bad, nm, bad);
  if (!cJSON_IsObject(e))
    return pz_error(PZ_ERR_IO, "safetensors %s: entry \"%s\" is not an object; the file is not valid safetensors", f->path, nm);
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
  const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
  if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
    return pz_error(PZ_ERR_IO, "safetensors %s: tensor \"%s\" lacks a string dtype, a shape array or a 2-element data_offsets; "
                    "the file is not valid safetensors", f->path, nm);
  int k = 0;
  while (k < PZ_ST_DTYPE_COUNT && strcmp(st_types[k].name, dt->valuestring)) k++;
  if (k == PZ_ST_DTYPE_COUNT)
    return pz_error(PZ_ERR_IO, "safetensors %s: tensor \"%s\" has unknown dtype \"%s\"; the file is not valid safetensors",
                    f->path, nm, dt->valuestring);
  t->dtype = (pz_st_dtype)k;
  t->ndim = cJSON_GetArraySize(sh);
  if (t->ndim > PZ_ST_MAX_DIMS)
    return pz_error(PZ_ERR_IO, "safetensors %s: tensor \"%s\" has %d dimensions (at most %d supported); use a smaller rank",
                    f->path, nm, t->ndim, PZ_ST_MAX_DIMS);
  uint64_t numel = 1;
  for (int d = 0; d < t->ndim; d++) {
    uint64_t v;
    if (!get_u64(cJSON_GetArrayItem(sh, d), &v))
      return pz_error(PZ_ERR_IO, "safetensors %s: tensor \"%s\" shape[%d] is not a non-negative integer; the file is corrupt",
                      f->path, nm, d);
    t->shape[d] = (int64_t)v;
    if (v && numel > UINT64_MAX / 64 / v)
      return pz_error(PZ_ERR_IO, "safetensors %s: tensor \"%s\" is too large; the file is corrupt", f->path, nm);
    numel *= v;
  }
  uint64_t b, en;
  if (!get_u64(cJSON_GetArrayItem(off, 0), &b) || !get_u64(cJSON_GetArrayItem(off, 1), &en) || en < b)
    return pz_error(PZ_ERR_IO, "safetensors %s: tensor \"%s\" has invalid data_offsets; the file is corrupt", f->path, nm);
  if (en > data_size)
    return pz_error(PZ_ERR_IO, "safetensors %s: tensor \"%s\" data [%llu, %llu) runs beyond the %zu data bytes; "
                    "the file is truncated", f->path, nm, (unsigned long long)b, (unsigned long long)en, data_size);
  if (numel * st_types[k].bits % 8)
    return pz_error(PZ_ERR_IO, "safetensors %s: tensor \"%s\" of %llu %s elements is not a whole number of bytes; the file "
                    "is corrupt", f->path, nm, (unsigned long long)numel, st_types[k].name);
  uint64_t want = numel * st_types[k].bits / 8;
  if (en - b != want)
    return pz_error(PZ_ERR_IO, "safetensors %s: tensor \"%s\" has %llu data bytes, its shape and dtype %s need %llu; "
                    "the file is corrupt", f->path, nm, (unsigned long long)(en - b), st_types[k].name,
                    (unsigned long long)want);
  t->numel = (int64_t)numel;
  t->nbytes = (size_t)want;
  t->file = f;
  t->name = strdup(nm);
  if (!t->name) return pz_error(PZ_ERR_OOM, "safetensors %s: out of memory", f->path);
  return PZ_OK;
}

static pz_status parse_header(pz_st_file *f) {
  if (f->size < 8)
    return pz_error(PZ_ERR_IO, "safetensors %s: %zu bytes, shorter than the 8-byte header length; the file is truncated",
                    f->path, f->size);
  const unsigned char *p = f->map;
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i];
  static const char lfs[] = "version https://git-lfs.github.com/spec/"; /* a pointer left by a clone without git lfs */
  if (f->size >= sizeof lfs - 1 && !memcmp(p, lfs, sizeof lfs - 1))
    return pz_error(PZ_ERR_IO, "safetensors %s: a Git LFS pointer file (%zu bytes), not the weights; fetch them (git lfs "
                    "pull, or download the file)", f->path, f->size);
  if (hlen > f->size - 8)
    return pz_error(PZ_ERR_IO, "safetensors %s: header length %llu runs beyond the file (%zu bytes); the file is truncated "
                    "or not safetensors", f->path, (unsigned long long)hlen, f->size);
  if (hlen > PZ_ST_MAX_HEADER)
    return pz_error(PZ_ERR_IO, "safetensors %s: header length %llu exceeds %llu bytes; the file is corrupt", f->path,
                    (unsigned long long)hlen, (unsigned long long)PZ_ST_MAX_HEADER);
  const char *js = (const char *)p + 8;
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(js, (size_t)hlen, &end, false);
  if (!root || !cJSON_IsObject(root)) {
    const char *e = cJSON_GetErrorPtr();
    size_t at = root ? 0 : (e && e >= js && e <= js + hlen) ? (size_t)(e - js) : (size_t)hlen;
    cJSON_Delete(root);
    return pz_error(PZ_ERR_IO, "safetensors %s: header (%llu bytes) is not a JSON object (error at byte %zu); the file is "
                    "truncated or corrupt", f->path, (unsigned long long)hlen, at);
  }
  if (pz_json_tail_bad(end, js + hlen, true)) { /* whitespace or NUL padding only */
    cJSON_Delete(root);
    return pz_error(PZ_ERR_IO, "safetensors %s: unexpected bytes after the header's JSON object; the file is corrupt", f->path);
  }
  const size_t data_size = f->size - 8 - (size_t)hlen;
  const char *data = js + hlen;
  int n = 0;
  for (const cJSON *e = root->child; e; e = e->next) n += strcmp(e->string, "__metadata__") != 0;
  f->t = calloc((size_t)(n ? n : 1), sizeof *f->t);
  if (!f->t) { cJSON_Delete(root); return pz_error(PZ_ERR_OOM, "safetensors %s: out of memory", f->path); }
  pz_status st = PZ_OK;
  const int nul_key = key_with_nul(js, (size_t)hlen);
  if (nul_key >= 0) {
    const cJSON *e = cJSON_GetArrayItem(root, nul_key);
    st = pz_error(PZ_ERR_IO, "safetensors %s: tensor name \"%s...\" has a NUL character (\\u0000); the file is corrupt "
                  "(tensor names are printable)", f->path, e && e->string ? e->string : "");
  }
  for (const cJSON *e = root->child; e && st == PZ_OK; e = e->next) {
    if (!strcmp(e->string, "__metadata__")) {
      /* The safetensors format: "__metadata__" is a free-form string-to-string map ("arbitrary JSON
       * is not allowed, all values must be strings"); the reference reader takes
       * Option<HashMap<String, String>>, so null passes too and anything else fails. */
      const cJSON *bad = cJSON_IsObject(e) ? NULL : cJSON_IsNull(e) ? NULL : e;
      for (const cJSON *m = cJSON_IsObject(e) ? e->child : NULL; m && !bad; m = m->next)
        if (!cJSON_IsString(m)) bad = m;
      if (bad)
        st = pz_error(PZ_ERR_IO, "safetensors %s: \"__metadata__\"%s%s%s is %s, but the format allows only a map of "
                      "string values; the file is not valid safetensors (fix or re-save it)", f->path,
                      bad == e ? "" : "[\"", bad == e ? "" : bad->string, bad == e ? "" : "\"]",
                      cJSON_IsArray(bad) ? "an array" : cJSON_IsObject(bad) ? "an object" : cJSON_IsNumber(bad) ? "a number"
                      : cJSON_IsString(bad) ? "a string" : cJSON_IsBool(bad) ? "a boolean" : "null");
      continue;
    }
    pz_st_tensor *t = &f->t[f->n];
    st = parse_entry(f, e, data_size, t);
    if (st != PZ_OK) break;
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    t->data = data + (size_t)cJSON_GetArrayItem(off, 0)->valuedouble;
    f->n++;
  }
  cJSON_Delete(root);
  if (st != PZ_OK) return st;
  /* cJSON keeps repeated keys: find them on a sorted copy. */
  pz_st_tensor *s = malloc(sizeof *s * (size_t)(n ? n : 1));
  if (!s) return pz_error(PZ_ERR_OOM, "safetensors %s: out of memory", f->path);
  memcpy(s, f->t, sizeof *s * (size_t)n);
  qsort(s, (size_t)n, sizeof *s, cmp_name);
  for (int i = 1; i < n && st == PZ_OK; i++)
    if (!strcmp(s[i - 1].name, s[i].name))
      st = pz_error(PZ_ERR_IO, "safetensors %s: tensor name \"%s\" appears twice in the header; the file is corrupt",
                    f->path, s[i].name);
  /* No two tensors may share a data byte (adjacent ranges and empty tensors are fine). */
  qsort(s, (size_t)n, sizeof *s, cmp_range);
  const pz_st_tensor *prev = NULL;
  for (int i = 0; i < n && st == PZ_OK; i++) {
    if (!s[i].nbytes) continue;
    size_t pb = prev ? (size_t)((const char *)prev->data - data) : 0, b = (size_t)((const char *)s[i].data - data);
    if (prev && pb + prev->nbytes > b)
      st = pz_error(PZ_ERR_IO, "safetensors %s: tensors \"%s\" [%zu, %zu) and \"%s\" [%zu, %zu) overlap in the data "
                    "area; the file is corrupt (each tensor needs its own bytes)", f->path, prev->name, pb,
                    pb + prev->nbytes, s[i].name, b, b + s[i].nbytes);
    prev = &s[i];
  }
  free(s);
  return st;
}

pz_status pz_st_open(const char *path, pz_st_file **out) {
  if (!path || !out) return pz_error(PZ_ERR_INVALID_ARG, "pz_st_open: NULL argument");
  *out = NULL;
  pz_st_file *f = calloc(1, sizeof *f);
  if (!f || !(f->path = strdup(path))) { free(f); return pz_error(PZ_ERR_OOM, "safetensors %s: out of memory", path); }
  struct stat sb; /* before opening: opening a FIFO blocks until a writer comes (a hang) */
  if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
    pz_st_close(f);
    return pz_error(PZ_ERR_IO, "safetensors %s: not a regular file; check the model directory", path);
  }
  int fd = open(path, O_RDONLY);
  if (fd < 0) {
    int err = errno;
    pz_st_close(f);
    return pz_error(PZ_ERR_IO, "safetensors %s: cannot open (%s); check the model directory", path, strerror(err));
  }
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    pz_st_close(f);
    return pz_error(PZ_ERR_IO, "safetensors %s: not a regular file; check the model directory", path);
  }
  f->size = (size_t)sb.st_size;
  if (f->size > 0) {
    void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      int err = errno;
      close(fd);
      pz_st_close(f);
      return pz_error(PZ_ERR_IO, "safetensors %s: mmap of %zu bytes failed (%s); check the file and the address-space limit", path, (size_t)sb.st_size, strerror(err));
    }
    f->map = m;
  }
  close(fd);
  pz_status st = parse_header(f);
  if (st != PZ_OK) { pz_st_close(f); return st; }
  *out = f;
  return PZ_OK;
}

void pz_st_close(pz_st_file *f) {
  if (!f) return;
  if (f->map) munmap(f->map, f->size);
  for (int i = 0; i < f->n; i++) free(f->t[i].name);
  free(f->t);
  free(f->path);
  free(f);
}

const pz_st_tensor *pz_st_find(const pz_st_file *f, const char *name) {
  if (!f || !name) return NULL;
  for (int i = 0; i < f->n; i++)
    if (!strcmp(f->t[i].name, name)) return &f->t[i];
  return NULL;
}

/* ------------------------------------------------------------------ writer */

pz_status pz_st_write(const char *path, int n, const pz_st_write_entry *en) {
  if (!path || n < 0 || (n > 0 && !en)) return pz_error(PZ_ERR_INVALID_ARG, "pz_st_write: NULL argument");
  cJSON *root = cJSON_CreateObject();
  if (!root) return pz_error(PZ_ERR_OOM, "pz_st_write: out of memory");
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    if (en[i].ndim < 0 || en[i].ndim > PZ_ST_MAX_DIMS || en[i].dtype >= PZ_ST_DTYPE_COUNT || !en[i].name) {
      cJSON_Delete(root);
      return pz_error(PZ_ERR_INVALID_ARG, "pz_st_write: entry %d has a bad name, ndim or dtype", i);
    }
    uint64_t numel = 1;
    cJSON *o = cJSON_CreateObject(), *sh = cJSON_CreateArray(), *of = cJSON_CreateArray();
    for (int d = 0; d < en[i].ndim; d++) {
      numel *= (uint64_t)en[i].shape[d];
      cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)en[i].shape[d]));
    }
    if (numel * pz_st_dtype_bits(en[i].dtype) % 8) {
      cJSON_Delete(o); cJSON_Delete(sh); cJSON_Delete(of); cJSON_Delete(root);
      return pz_error(PZ_ERR_INVALID_ARG, "pz_st_write: entry %d (%s) is not a whole number of bytes", i,
                      pz_st_dtype_name(en[i].dtype));
    }
    uint64_t nb = numel * pz_st_dtype_bits(en[i].dtype) / 8;
    cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
    cJSON_AddItemToArray(of, cJSON_CreateNumber((double)(off + nb)));
    cJSON_AddStringToObject(o, "dtype", pz_st_dtype_name(en[i].dtype));
    cJSON_AddItemToObject(o, "shape", sh);
    cJSON_AddItemToObject(o, "data_offsets", of);
    cJSON_AddItemToObject(root, en[i].name, o);
    off += nb;
  }
  char *js = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  if (!js) return pz_error(PZ_ERR_OOM, "pz_st_write: out of memory");
  size_t hl = strlen(js), padded = (hl + 7) / 8 * 8;
  FILE *f = fopen(path, "wb");
  if (!f) { free(js); return pz_error(PZ_ERR_IO, "safetensors %s: cannot create (%s); check the directory", path, strerror(errno)); }
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
  int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(js, 1, hl, f) == hl;
  for (size_t i = hl; i < padded && ok; i++) ok = fputc(' ', f) != EOF;
  free(js);
  for (int i = 0; i < n && ok; i++) {
    uint64_t numel = 1;
    for (int d = 0; d < en[i].ndim; d++) numel *= (uint64_t)en[i].shape[d];
    size_t nb = (size_t)(numel * pz_st_dtype_bits(en[i].dtype) / 8);
    ok = nb == 0 || (en[i].data && fwrite(en[i].data, 1, nb, f) == nb);
  }
  if (fclose(f) != 0) ok = 0;
  if (!ok) return pz_error(PZ_ERR_IO, "safetensors %s: write failed; check the disk space and permissions", path);
  return PZ_OK;
}
