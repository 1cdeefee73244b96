/* safetensors reader/writer and FP8 E4M3 decoding: round trip of every field, hand-checked FP8
 * values, block dequantisation against a reference computed here, and every malformed file
 * (short file, header length beyond the file, truncated header, unknown dtype, data beyond the
 * file, size mismatch, duplicate name, overlapping data ranges, an empty name or one with a NUL,
 * a control character or invalid UTF-8) giving a one-line PZ_ERR_IO. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include "core/fp8.h"
#include "model/safetensors.h"
#include "pz_test.h"

static char dir[] = "/tmp/pz_test_st_XXXXXX";

static void path_of(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", dir, name); }

/* Writes raw bytes: an 8-byte little-endian length `hlen`, then `header` (strlen bytes), then
 * `data_len` bytes of data. */
static void write_raw(const char *name, uint64_t hlen, const char *header, size_t data_len) {
  char p[300];
  path_of(p, sizeof p, name);
  FILE *f = fopen(p, "wb");
  if (!f) { perror(p); exit(1); }
  for (int i = 0; i < 8; i++) fputc((int)((hlen >> (8 * i)) & 0xff), f);
  fputs(header, f);
  for (size_t i = 0; i < data_len; i++) fputc((int)(i & 0xff), f);
  fclose(f);
}

/* Opening `name` must fail with PZ_ERR_IO and a one-line message containing `needle`. */
static void bad_file(const char *name, const char *needle) {
  char p[300];
  path_of(p, sizeof p, name);
  pz_st_file *f = (pz_st_file *)1;
  pz_status st = pz_st_open(p, &f);
  const char *msg = pz_last_error();
  int ok = st == PZ_ERR_IO && f == NULL && strstr(msg, needle) && !strchr(msg, '\n') && strstr(msg, p);
  if (!ok) {
    fprintf(stderr, "FAIL: %s -> %s, f=%p, msg [%s] (want PZ_ERR_IO with '%s')\n", name, pz_status_string(st),
            (void *)f, msg, needle);
    pz_test_failures++;
  }
  if (f && f != (pz_st_file *)1) pz_st_close(f);
}

/* E4M3 value from its bits, computed differently from fp8.c (double pow, no tables). */
static double e4m3_ref(unsigned b) {
  unsigned s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return NAN;
  double v = e ? (1.0 + m / 8.0) * pow(2.0, (double)e - 7.0) : (m / 8.0) * pow(2.0, -6.0);
  return s ? -v : v;
}

static void test_roundtrip(void) {
  float a[6] = {1.5f, -2.0f, 0.25f, 3.0f, -0.0f, 1e-3f};
  uint16_t b[4] = {0x3f80, 0xbf80, 0x4000, 0x0001};
  uint8_t c[3] = {0x38, 0xb8, 0x7e};
  pz_st_write_entry en[3] = {
      {.name = "a.weight", .dtype = PZ_ST_F32, .ndim = 2, .shape = {2, 3}, .data = a},
      {.name = "b", .dtype = PZ_ST_BF16, .ndim = 1, .shape = {4}, .data = b},
      {.name = "layers.0.c", .dtype = PZ_ST_F8_E4M3, .ndim = 3, .shape = {1, 3, 1}, .data = c},
  };
  char p[300];
  path_of(p, sizeof p, "rt.safetensors");
  CHECK_OK(pz_st_write(p, 3, en));
  pz_st_file *f = NULL;
  CHECK_OK(pz_st_open(p, &f));
  if (!f) return;
  CHECK(f->n == 3);
  const pz_st_tensor *t = pz_st_find(f, "a.weight");
  CHECK(t && t->dtype == PZ_ST_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 && t->numel == 6 &&
        t->nbytes == 24 && !memcmp(t->data, a, 24));
  t = pz_st_find(f, "b");
  CHECK(t && t->dtype == PZ_ST_BF16 && t->ndim == 1 && t->shape[0] == 4 && !memcmp(t->data, b, 8));
  t = pz_st_find(f, "layers.0.c");
  CHECK(t && t->dtype == PZ_ST_F8_E4M3 && t->ndim == 3 && t->shape[1] == 3 && t->nbytes == 3 && !memcmp(t->data, c, 3));
  CHECK(pz_st_find(f, "missing") == NULL);
  /* The header is padded to 8 bytes, so every data block starts 8-byte aligned in the file. */
  CHECK(((const char *)pz_st_find(f, "a.weight")->data - (const char *)f->map) % 8 == 0);
  pz_st_close(f);
  CHECK(strcmp(pz_st_dtype_name(PZ_ST_F8_E4M3), "F8_E4M3") == 0 && pz_st_dtype_size(PZ_ST_I64) == 8);
}

static void test_fp8(void) {
  /* Hand-checked values of the E4M3 (fn) encoding. */
  CHECK(pz_fp8_e4m3_to_f32(0x00) == 0.0f);
  CHECK(pz_fp8_e4m3_to_f32(0x38) == 1.0f);        /* e=7, m=0 */
  CHECK(pz_fp8_e4m3_to_f32(0xb8) == -1.0f);
  CHECK(pz_fp8_e4m3_to_f32(0x3c) == 1.5f);        /* m=4 */
  CHECK(pz_fp8_e4m3_to_f32(0x40) == 2.0f);
  CHECK(pz_fp8_e4m3_to_f32(0x7e) == 448.0f);      /* the largest finite value */
  CHECK(pz_fp8_e4m3_to_f32(0x08) == 0.015625f);   /* 2^-6, smallest normal */
  CHECK(pz_fp8_e4m3_to_f32(0x01) == 0.001953125f);/* 2^-9, smallest subnormal */
  CHECK(pz_fp8_e4m3_to_f32(0x07) == 0.013671875f);/* 7/8 * 2^-6 */
  CHECK(isnan(pz_fp8_e4m3_to_f32(0x7f)) && isnan(pz_fp8_e4m3_to_f32(0xff)));
  CHECK(signbit(pz_fp8_e4m3_to_f32(0x80)) && pz_fp8_e4m3_to_f32(0x80) == 0.0f);
  int bad = 0;
  for (unsigned b = 0; b < 256; b++) {
    double r = e4m3_ref(b);
    float v = pz_fp8_e4m3_to_f32((uint8_t)b);
    if (isnan(r) ? !isnan(v) : (double)v != r) bad++;
  }
  CHECK(bad == 0);

  /* Block dequantisation of a [5, 7] weight in 2x3 blocks (scale_inv [3, 3]), every row and a
   * column window, against the reference here: w * scale_inv[r/2][c/3]. */
  enum { R = 5, C = 7, BM = 2, BN = 3, SR = 3, SC = 3 };
  uint8_t w[R * C];
  float sc[SR * SC];
  for (int i = 0; i < R * C; i++) w[i] = (uint8_t)((i * 37 + 11) & 0xff);
  w[3] = 0x7e;
  w[4] = 0x7f; /* NaN stays NaN */
  for (int i = 0; i < SR * SC; i++) sc[i] = 0.5f + 0.25f * (float)i;
  bad = 0;
  for (int r = 0; r < R; r++) {
    float out[C];
    pz_fp8_dequant_row(w, C, sc, SC, BM, BN, r, 0, C, out);
    for (int c = 0; c < C; c++) {
      double want = e4m3_ref(w[r * C + c]) * (double)sc[(r / BM) * SC + c / BN];
      if (isnan(want) ? !isnan(out[c]) : (double)out[c] != (double)(float)want) bad++;
    }
    float part[3];
    pz_fp8_dequant_row(w, C, sc, SC, BM, BN, r, 2, 3, part); /* columns 2..4 cross a block edge */
    for (int j = 0; j < 3; j++) {
      double want = e4m3_ref(w[r * C + 2 + j]) * (double)sc[(r / BM) * SC + (2 + j) / BN];
      if (isnan(want) ? !isnan(part[j]) : (double)part[j] != (double)(float)want) bad++;
    }
  }
  CHECK(bad == 0);
}

static void test_bad_files(void) {
  char p[300];
  path_of(p, sizeof p, "short.safetensors");
  FILE *f = fopen(p, "wb");
  fputs("abc", f);
  fclose(f);
  bad_file("short.safetensors", "shorter than the 8-byte header length");

  const char *good = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  write_raw("ok.safetensors", strlen(good), good, 8);
  pz_st_file *ok = NULL;
  path_of(p, sizeof p, "ok.safetensors");
  CHECK_OK(pz_st_open(p, &ok));
  pz_st_close(ok);

  /* Header length beyond the file. */
  write_raw("hlen.safetensors", 100000, good, 8);
  bad_file("hlen.safetensors", "runs beyond the file");
  /* A Git LFS pointer (a clone without git lfs) in place of the weights: said so, not "truncated". */
  path_of(p, sizeof p, "lfs.safetensors");
  f = fopen(p, "wb");
  fputs("version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d"
        "17e2393\nsize 213760\n", f);
  fclose(f);
  bad_file("lfs.safetensors", "lfs.safetensors: a Git LFS pointer file (131 bytes), not the weights; fetch them (git lfs "
           "pull, or download the file)");
  /* A header length within the file but JSON cut short (truncated header). */
  const char *cut = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_of";
  write_raw("trunc.safetensors", strlen(cut), cut, 0);
  bad_file("trunc.safetensors", "is not a JSON object");
  /* Unknown dtype. */
  const char *dt = "{\"x\":{\"dtype\":\"Q4_K\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  write_raw("dtype.safetensors", strlen(dt), dt, 8);
  bad_file("dtype.safetensors", "unknown dtype \"Q4_K\"");
  /* The format's newer types open, with their sizes in bits: F8_E8M0 (the MX scale type, one byte), F4 (two
   * per byte), F6_E2M3 (4 in 3 bytes), C64 (8 bytes); a checkpoint that holds an unused tensor of them loads. */
  const char *nt = "{\"s\":{\"dtype\":\"F8_E8M0\",\"shape\":[4],\"data_offsets\":[0,4]},"
                   "\"p\":{\"dtype\":\"F4\",\"shape\":[2,3],\"data_offsets\":[4,7]},"
                   "\"q\":{\"dtype\":\"F6_E2M3\",\"shape\":[4],\"data_offsets\":[7,10]},"
                   "\"c\":{\"dtype\":\"C64\",\"shape\":[1],\"data_offsets\":[10,18]},"
                   "\"z\":{\"dtype\":\"F8_E4M3FNUZ\",\"shape\":[2],\"data_offsets\":[18,20]},"
                   "\"y\":{\"dtype\":\"F8_E5M2FNUZ\",\"shape\":[2],\"data_offsets\":[20,22]}}";
  write_raw("newtypes.safetensors", strlen(nt), nt, 22);
  pz_st_file *nf = NULL;
  path_of(p, sizeof p, "newtypes.safetensors");
  CHECK_OK(pz_st_open(p, &nf));
  if (nf) {
    const pz_st_tensor *ts = pz_st_find(nf, "s"), *tp = pz_st_find(nf, "p"), *tq = pz_st_find(nf, "q"),
                       *tc = pz_st_find(nf, "c");
    CHECK(ts && ts->dtype == PZ_ST_F8_E8M0 && ts->nbytes == 4 && tp && tp->dtype == PZ_ST_F4 && tp->numel == 6 &&
          tp->nbytes == 3 && tq && tq->dtype == PZ_ST_F6_E2M3 && tq->nbytes == 3 && tc && tc->nbytes == 8);
    const pz_st_tensor *tz = pz_st_find(nf, "z"), *ty = pz_st_find(nf, "y");
    CHECK(tz && tz->dtype == PZ_ST_F8_E4M3FNUZ && tz->nbytes == 2 && ty && ty->dtype == PZ_ST_F8_E5M2FNUZ);
    pz_st_close(nf);
  }
  CHECK(pz_st_dtype_bits(PZ_ST_F4) == 4 && pz_st_dtype_size(PZ_ST_F4) == 0 && pz_st_dtype_size(PZ_ST_F8_E8M0) == 1);
  /* Sub-byte elements that do not fill whole bytes (3 F4 values: 12 bits). */
  const char *odd = "{\"p\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}";
  write_raw("f4_odd.safetensors", strlen(odd), odd, 8);
  bad_file("f4_odd.safetensors", "is not a whole number of bytes");
  /* Data beyond the file (the file was cut after the header). */
  write_raw("data.safetensors", strlen(good), good, 4);
  bad_file("data.safetensors", "runs beyond the 4 data bytes");
  /* Offsets that disagree with shape x dtype size. */
  const char *sz = "{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}";
  write_raw("size.safetensors", strlen(sz), sz, 8);
  bad_file("size.safetensors", "need 12");
  /* The same name twice in one header (cJSON keeps both). */
  const char *dup = "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                    "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}";
  write_raw("dup.safetensors", strlen(dup), dup, 8);
  bad_file("dup.safetensors", "appears twice");
  /* Overlapping data ranges, found after sorting by start (the later entry starts first here). */
  const char *ovl = "{\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},"
                    "\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  write_raw("overlap.safetensors", strlen(ovl), ovl, 12);
  bad_file("overlap.safetensors", "tensors \"x\" [0, 8) and \"y\" [4, 12) overlap in the data area");
  /* One range inside another, with a disjoint one between them in header order. */
  const char *inside = "{\"a\":{\"dtype\":\"U8\",\"shape\":[10],\"data_offsets\":[0,10]},"
                       "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[10,12]},"
                       "\"c\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[3,4]}}";
  write_raw("inside.safetensors", strlen(inside), inside, 12);
  bad_file("inside.safetensors", "tensors \"a\" [0, 10) and \"c\" [3, 4) overlap");
  /* Adjacent ranges, and empty tensors at any offset (even inside another's range), are fine. */
  const char *adj = "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                    "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[2,2]},"
                    "\"f\":{\"dtype\":\"F32\",\"shape\":[2,0],\"data_offsets\":[4,4]}}";
  write_raw("adjacent.safetensors", strlen(adj), adj, 8);
  path_of(p, sizeof p, "adjacent.safetensors");
  pz_st_file *af = NULL;
  CHECK_OK(pz_st_open(p, &af));
  CHECK(af && af->n == 4 && pz_st_find(af, "a") && pz_st_find(af, "b") && pz_st_find(af, "e") && pz_st_find(af, "f"));
  pz_st_close(af);
  /* Names: empty, a NUL (escaped or raw; cJSON would cut the name there), a control character;
   * the message never carries the raw byte. A \\u0000 (escaped backslash) is an ordinary name. */
  const char *empty = "{\"\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  write_raw("name_empty.safetensors", strlen(empty), empty, 8);
  bad_file("name_empty.safetensors", "a tensor has an empty name");
  const char *nul = "{\"__metadata__\":{\"k\":\"v\\u0000\"},\"ok\":{\"dtype\":\"U8\",\"shape\":[1],"
                    "\"data_offsets\":[0,1]},\"ab\\u0000cd\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}";
  write_raw("name_nul.safetensors", strlen(nul), nul, 2);
  bad_file("name_nul.safetensors", "tensor name \"ab...\" has a NUL character");
  static const char raw_nul[] = "{\"ab\0c\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
  path_of(p, sizeof p, "name_raw_nul.safetensors");
  f = fopen(p, "wb");
  for (int i = 0; i < 8; i++) fputc(i ? 0 : (int)(sizeof raw_nul - 1), f);
  fwrite(raw_nul, 1, sizeof raw_nul - 1, f);
  fputc(0, f);
  fclose(f);
  bad_file("name_raw_nul.safetensors", "tensor name \"ab...\" has a NUL character");
  /* One F32[2] tensor under a bad name: a control character, DEL; not UTF-8 (a lone continuation
   * byte, an overlong '/', a surrogate). {file, header, message}. */
  static const char *const bad_names[][3] = {
      {"name_ctl.safetensors", "{\"x\\ny\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
       "tensor name \"x...\" has control character 0x0a at byte 1"},
      {"name_del.safetensors", "{\"xy\\u007f\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
       "control character 0x7f at byte 2"},
      {"name_utf8_cont.safetensors", "{\"ab\x80\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
       "tensor name \"ab...\" is not valid UTF-8 at byte 2"},
      {"name_utf8_overlong.safetensors", "{\"a\xc0\xaf\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
       "is not valid UTF-8 at byte 1"},
      {"name_utf8_surrogate.safetensors", "{\"\xed\xa0\x80\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
       "is not valid UTF-8 at byte 0"},
  };
  for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
    write_raw(bad_names[i][0], strlen(bad_names[i][1]), bad_names[i][1], 8);
    bad_file(bad_names[i][0], bad_names[i][2]);
  }
  /* A valid multi-byte name opens. */
  const char *u4 = "{\"w\xc3\xa9ight\xe2\x82\xac\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  write_raw("name_utf8_ok.safetensors", strlen(u4), u4, 8);
  path_of(p, sizeof p, "name_utf8_ok.safetensors");
  pz_st_file *uf = NULL;
  CHECK_OK(pz_st_open(p, &uf));
  CHECK(uf && uf->n == 1 && pz_st_find(uf, "w\xc3\xa9ight\xe2\x82\xac"));
  pz_st_close(uf);
  const char *bsl = "{\"a\\\\u0000\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  write_raw("name_backslash.safetensors", strlen(bsl), bsl, 8);
  path_of(p, sizeof p, "name_backslash.safetensors");
  pz_st_file *bf = NULL;
  CHECK_OK(pz_st_open(p, &bf));
  CHECK(bf && bf->n == 1 && !strcmp(bf->t[0].name, "a\\u0000"));
  pz_st_close(bf);
  /* Missing field. */
  const char *nof = "{\"x\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}";
  write_raw("nofield.safetensors", strlen(nof), nof, 8);
  bad_file("nofield.safetensors", "lacks");
  bad_file("does_not_exist.safetensors", "cannot open");
}

int main(void) {
  if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
  test_roundtrip();
  test_fp8();
  test_bad_files();
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  TEST_DONE();
}
