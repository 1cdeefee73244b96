/* The seeded weight / KV-cache fill (core/fill_rule.h) against values pinned from the code it
 * replaced, directly and through the CPU executor, so a drift is caught without a GPU (the CUDA
 * fill uses the same header; tests/cuda/test_exec.c compares the two bit for bit on a GPU). */
#include "backend/cpu/cpu_backend.h"
#include "core/fill_rule.h"
#include <inttypes.h>
#include <string.h>
#include "pz_test.h"

/* Pinned (seed, name, full index, dtype, scale, offset) -> key, u bits, stored bits: printed by a
 * throwaway program that called the previous cpu_exec.c's name_key / hash_unit (before the
 * rule moved into core/fill_rule.h) and stored v like fill_rows did. */
typedef struct pin {
  uint64_t seed;
  const char *name;
  uint64_t idx;
  pz_dtype dtype;
  float scale, offset;
  uint64_t key;
  uint32_t u_bits, stored_bits;
} pin;
static const pin pins[] = {
  {1234, "layers.0.mlp.gate_proj.weight", 0, PZ_BF16, 0.02f, 0.0f, 0x1bcf4371b971609cull, 0x3f1cc07cu, 0x3c49u},
  {1234, "layers.0.mlp.gate_proj.weight", 1, PZ_F32, 0.02f, 0.0f, 0x1bcf4371b971609cull, 0x3f701f94u, 0x3c99adcfu},
  {4242, "embed_tokens.weight", 123456, PZ_BF16, 1.0f, 0.0f, 0xfb5d5c5ddd7358d5ull, 0xbf1ad956u, 0xbf1bu},
  {4242, "layers.3.self_attn.kv_cache", 7, PZ_BF16, 1.0f, 0.0f, 0x395d2e02c1e0802bull, 0x3e580320u, 0x3e58u},
  {0, "", 0, PZ_F32, 1.0f, 0.0f, 0x21fa69a58f3d62f5ull, 0xbe8938dcu, 0xbe8938dcu},
  {0xdeadbeefcafef00dull, "x", 5000000000ull, PZ_F32, 0.5f, 0.25f, 0xb2db0972fea2c8b7ull, 0xbf20b872u, 0xbd82e1c8u},
  {7, "router.bias", 3, PZ_I32, 100.0f, 50.0f, 0xad4c55bd3d6adfc8ull, 0xbf195476u, 0xfffffff7u},    /* -9.89 -> -9 */
  {7, "router.bias", 4, PZ_I32, -3.5f, 0.0f, 0xad4c55bd3d6adfc8ull, 0xbf2bee38u, 0x00000002u},      /* 2.35 -> 2 */
  {99, "w", ((uint64_t)1 << 50) - 1, PZ_BF16, 3e-3f, 1.0f, 0x1be8dfd928702391ull, 0x3ee7d39cu, 0x3f80u},
  {99, "w", 42, PZ_I32, 0.0f, -7.9f, 0x1be8dfd928702391ull, 0x3db6c520u, 0xfffffff9u},              /* -7 */
  {1, "layers.60.mlp.experts.255.down_proj.weight", 987654321, PZ_F32, 0.125f, -0.5f, 0xe006ae69b337ceedull,
   0x3f2749feu, 0xbed62d80u},
};

static uint32_t f32_bits(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}
static float bits_f32(uint32_t u) {
  float v;
  memcpy(&v, &u, 4);
  return v;
}

static void test_pinned_values(void) {
  for (size_t i = 0; i < sizeof pins / sizeof pins[0]; i++) {
    const pin *p = &pins[i];
    uint64_t key = pz_fill_name_key(p->seed, p->name);
    uint32_t u = f32_bits(pz_fill_unit(key, p->idx));
    uint32_t b = pz_fill_bits(key, p->idx, p->scale, p->offset, p->dtype);
    float v = pz_fill_value(key, p->idx, p->scale, p->offset);
    uint32_t b2 = p->dtype == PZ_BF16 ? pz_fill_bf16_bits(v) : p->dtype == PZ_F32 ? f32_bits(v) : (uint32_t)pz_fill_i32(v);
    if (key != p->key || u != p->u_bits || b != p->stored_bits || b2 != p->stored_bits)
      fprintf(stderr, "pin %zu (seed %" PRIu64 ", \"%s\", idx %" PRIu64 "): key %016" PRIx64 " u %08" PRIx32
              " bits %08" PRIx32 "/%08" PRIx32 ", want %016" PRIx64 " %08" PRIx32 " %08" PRIx32 "\n",
              i, p->seed, p->name, p->idx, key, u, b, b2, p->key, p->u_bits, p->stored_bits);
    CHECK(key == p->key);
    CHECK(u == p->u_bits);
    CHECK(b == p->stored_bits);
    CHECK(b2 == p->stored_bits);
  }
}

/* u is in [-1, 1) and a multiple of 2^-23 (24 bits of the hash). */
static void test_unit_range(void) {
  uint64_t key = pz_fill_name_key(5, "range");
  for (uint64_t i = 0; i < 100000; i++) {
    float u = pz_fill_unit(key, i);
    CHECK(u >= -1.0f && u < 1.0f);
    float s = (u + 1.0f) * 8388608.0f;
    if (s != (float)(int64_t)s) { CHECK(!"u not a multiple of 2^-23"); break; }
  }
}

/* pz_fill_bf16_bits is core/dtype.h's pz_f32_to_bf16 (the CPU's converter) on a sweep of bit
 * patterns (every 251st, all signs and exponents) and on the specials and ties. */
static void test_bf16_matches_dtype(void) {
  int bad = 0;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 251)
    if (pz_fill_bf16_bits(bits_f32((uint32_t)u)) != pz_f32_to_bf16(bits_f32((uint32_t)u))) bad++;
  const uint32_t special[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u,
                              0x7f800001u, 0xff800001u, 0x7f7fffffu, 0x3f808000u, 0x3f818000u, 0x3f807fffu,
                              0x3f808001u, 0x00008000u, 0x00018000u, 0x7f7f8000u};
  for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
    if (pz_fill_bf16_bits(bits_f32(special[i])) != pz_f32_to_bf16(bits_f32(special[i]))) bad++;
  CHECK(bad == 0);
  CHECK(pz_fill_bf16_bits(bits_f32(0x3f808000u)) == 0x3f80u); /* tie to even: down */
  CHECK(pz_fill_bf16_bits(bits_f32(0x3f818000u)) == 0x3f82u); /* tie to even: up */
  CHECK(pz_fill_bf16_bits(bits_f32(0x7f800001u)) == 0x7fc0u); /* signalling NaN -> quiet */
  CHECK(pz_fill_bf16_bits(bits_f32(0x7f7fffffu)) == 0x7f80u); /* FLT_MAX -> inf */
}

/* Truncation toward zero, saturating, NaN -> 0 (the device's cvt.rzi.s32.f32). */
static void test_i32(void) {
  CHECK(pz_fill_i32(2.99f) == 2);
  CHECK(pz_fill_i32(-2.99f) == -2);
  CHECK(pz_fill_i32(-0.5f) == 0);
  CHECK(pz_fill_i32(2147483520.0f) == 2147483520); /* largest f32 below 2^31 */
  CHECK(pz_fill_i32(2147483648.0f) == INT32_MAX);
  CHECK(pz_fill_i32(-2147483648.0f) == INT32_MIN);
  CHECK(pz_fill_i32(-3e9f) == INT32_MIN);
  CHECK(pz_fill_i32(bits_f32(0x7fc00000u)) == 0);
  CHECK(pz_fill_i32(bits_f32(0x7f800000u)) == INT32_MAX);
}

/* ---------------------------------------------------------------- through the CPU executor */

typedef struct tdesc {
  const char *name;
  pz_dtype dtype;
  pz_tensor_kind kind;
  int ndim;
  int64_t ne[PZ_MAX_DIMS];
  int shard_dim;
  float scale, offset;
  uint64_t fnv[2]; /* FNV-1a 64 of the stored bytes (little-endian) on ranks 0 and 1 */
} tdesc;
/* TP 2, seed 4242; checksums from the previous code (the same throwaway program). Sharded dims
 * have full_ne = 2 * ne; the KV caches ignore their offset and the first one's scale 0 (-> 1). */
static const tdesc tensors[] = {
  {"layers.0.w_bf16", PZ_BF16, PZ_T_WEIGHT, 2, {4, 6}, 0, 0.02f, 0.0f, {0x14ba68a7008c444bull, 0x646eadf8353a1535ull}},
  {"layers.0.w_f32", PZ_F32, PZ_T_WEIGHT, 2, {3, 5}, 1, 1.5f, 0.25f, {0x68d09d379494061eull, 0x0dc0a3205d7954f2ull}},
  {"layers.0.w3_f32", PZ_F32, PZ_T_WEIGHT, 3, {2, 2, 3}, 1, 0.75f, 0.0f, {0x5526efe90406c43bull, 0xe06a4323ec819e3bull}},
  {"layers.0.idx_i32", PZ_I32, PZ_T_WEIGHT, 1, {16}, -1, 100.0f, 50.0f, {0x3a701108d9f3ac15ull, 0x3a701108d9f3ac15ull}},
  {"layers.0.self_attn.kv_cache", PZ_BF16, PZ_T_STATE, 3, {2, 3, 4}, -1, 0.0f, 0.0f,
   {0xbd617fcc1a60a08bull, 0xbd617fcc1a60a08bull}},
  {"layers.0.self_attn.kv_cache2.kv_cache", PZ_F32, PZ_T_STATE, 2, {3, 4}, -1, 0.5f, 9.0f,
   {0xcd3cc1ea89442c6eull, 0xcd3cc1ea89442c6eull}},
};
enum { NT = sizeof tensors / sizeof tensors[0], TP = 2 };

/* Single stored elements from the same run: (tensor, rank, local flat index) -> bits. */
static const struct { int t, rank, i; uint32_t bits; } elems[] = {
  {0, 0, 0, 0xbc17u}, {0, 1, 0, 0xbbfbu}, {0, 1, 23, 0x3c4du},
  {1, 0, 0, 0xbe644238u}, {1, 1, 14, 0x3fadbd54u},
  {2, 1, 5, 0x3ebca3f0u},
  {3, 0, 1, 0xffffffecu}, {3, 1, 15, 0x49u},
  {4, 1, 23, 0xbf28u},
  {5, 0, 0, 0x3ec0579eu},
};

static uint32_t elem_bits(const void *d, pz_dtype dt, int64_t i) {
  if (dt == PZ_BF16) return ((const uint16_t *)d)[i];
  return ((const uint32_t *)d)[i];
}

static uint64_t fnv_le(const void *d, pz_dtype dt, int64_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  const int bytes = (int)pz_dtype_size(dt);
  for (int64_t i = 0; i < n; i++) {
    uint32_t x = elem_bits(d, dt, i);
    for (int b = 0; b < bytes; b++) h = (h ^ ((x >> (8 * b)) & 0xffu)) * 0x100000001b3ull;
  }
  return h;
}

static void test_executor(void) {
  pz_graph_info info = {.tp = TP, .m = 1, .n_layers = 1, .hidden = 8, .vocab_size = 8, .rms_eps = 1e-6f};
  pz_graph *g = NULL;
  CHECK_OK(pz_graph_create(&info, &g));
  if (!g) return;
  for (int i = 0; i < NT; i++) {
    const tdesc *d = &tensors[i];
    int id = -1;
    CHECK_OK(pz_graph_add_tensor(g, d->name, d->dtype, d->kind, d->ndim, d->ne, &id));
    CHECK(id == i);
    pz_tensor *t = &g->tensors[id];
    t->shard_dim = d->shard_dim;
    if (d->shard_dim >= 0) t->full_ne[d->shard_dim] = TP * d->ne[d->shard_dim];
    t->init_scale = d->scale;
    t->init_offset = d->offset;
  }
  pz_cpu_exec_opts o = PZ_CPU_EXEC_OPTS_INIT;
  o.seed = 4242;
  o.threads = 2;
  pz_cpu_exec *e = NULL;
  CHECK_OK(pz_cpu_exec_create(g, &o, &e));
  if (!e) { pz_graph_free(g); return; }

  for (int i = 0; i < NT; i++) {
    const tdesc *d = &tensors[i];
    const pz_tensor *t = &g->tensors[i];
    const int64_t n = pz_tensor_numel(t);
    const int weight = d->kind == PZ_T_WEIGHT;
    const uint64_t key = pz_fill_name_key(o.seed, d->name);
    const float scale = weight ? d->scale : d->scale != 0.0f ? d->scale : 1.0f;
    const float offset = weight ? d->offset : 0.0f;
    for (int r = 0; r < TP; r++) {
      const void *data = pz_cpu_exec_data(e, r, i);
      CHECK(data != NULL);
      if (!data) continue;
      uint64_t h = fnv_le(data, d->dtype, n);
      if (h != d->fnv[r])
        fprintf(stderr, "%s rank %d: fnv %016" PRIx64 ", want %016" PRIx64 "\n", d->name, r, h, d->fnv[r]);
      CHECK(h == d->fnv[r]);
      /* Every element is the rule at its full index, computed here from its coordinates. */
      int bad = 0;
      for (int64_t k = 0; k < n; k++) {
        int64_t rem = k, full = 0, mult = 1;
        for (int dd = d->ndim - 1; dd >= 0; dd--) {
          int64_t c = rem % d->ne[dd];
          rem /= d->ne[dd];
          int sharded = weight && dd == d->shard_dim;
          full += (c + (sharded ? (int64_t)r * d->ne[dd] : 0)) * mult;
          mult *= sharded ? TP * d->ne[dd] : d->ne[dd];
        }
        if (elem_bits(data, d->dtype, k) != pz_fill_bits(key, (uint64_t)full, scale, offset, d->dtype)) bad++;
      }
      if (bad) fprintf(stderr, "%s rank %d: %d element(s) differ from the rule\n", d->name, r, bad);
      CHECK(bad == 0);
    }
  }
  for (size_t k = 0; k < sizeof elems / sizeof elems[0]; k++) {
    const void *data = pz_cpu_exec_data(e, elems[k].rank, elems[k].t);
    CHECK(data && elem_bits(data, tensors[elems[k].t].dtype, elems[k].i) == elems[k].bits);
  }
  pz_cpu_exec_free(e);
  pz_graph_free(g);
}

int main(void) {
  test_pinned_values();
  test_unit_range();
  test_bf16_matches_dtype();
  test_i32();
  test_executor();
  TEST_DONE();
}
