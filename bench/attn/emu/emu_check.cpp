/* CPU check of the MLA kernels' indexing (kernels/mla_kernels.cu run on the emulator of emu.h)
 * against pz_ref_mla_decode: prep, absorb, attention v1 and v2, combine, W_UV, with the q_b /
 * o_proj GEMMs done by pz_ref_gemm. Small shapes only (one OS thread per CUDA thread).
 * Build and run: bash bench/attn/emu/run.sh. Development tool, not a ctest target. */
#include "emu.h"
#include <stdio.h>
#include <stdlib.h>
#include <thread>
extern "C" {
#include "core/status.h"
}
#include "backend/cpu/ref_ops.h"
#include "backend/cuda/mla_kernels.h"
#include "core/kv_pages.h"
#include "core/kv_sched.h"
#include "gen_kernels.inc" /* mla_kernels.cu's kernels, made host code by run.sh */

thread_local EmuTls emu_tls;
EmuCta *emu_cta = nullptr;

void emu_launch(dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()> &f) {
  const int nt = (int)block.x;
  for (unsigned z = 0; z < grid.z; z++)
    for (unsigned y = 0; y < grid.y; y++)
      for (unsigned x = 0; x < grid.x; x++) {
        EmuCta cta;
        cta.smem.assign(smem_bytes / 16 + 1, make_uint4(0x7fc07fc0u, 0x7fc07fc0u, 0x7fc07fc0u, 0x7fc07fc0u));
        pthread_barrier_init(&cta.bar, nullptr, (unsigned)nt);
        cta.warps.resize((size_t)(nt + 31) / 32);
        for (auto &w : cta.warps) pthread_barrier_init(&w.bar, nullptr, 32);
        emu_cta = &cta;
        std::vector<std::thread> th;
        for (int t = 0; t < nt; t++)
          th.emplace_back([&, t] {
            emu_tls.tid = dim3((unsigned)t, 0, 0);
            emu_tls.bid = dim3(x, y, z);
            emu_tls.bdim = block;
            emu_tls.gdim = grid;
            f();
          });
        for (auto &h : th) h.join();
        for (auto &w : cta.warps) pthread_barrier_destroy(&w.bar);
        pthread_barrier_destroy(&cta.bar);
      }
}

static uint32_t rng = 4242;
static float uni() {
  rng ^= rng << 13; rng ^= rng >> 17; rng ^= rng << 5;
  return (float)(rng & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}
static std::vector<uint16_t> rbf(int64_t n, float sc, float off) {
  std::vector<uint16_t> v((size_t)n);
  for (auto &x : v) x = pz_f32_to_bf16(off + sc * uni());
  return v;
}

static int failures = 0;

static void run_case(const char *name, int heads, int64_t H, int64_t ql, int64_t L, int64_t nope, int64_t rope,
                     int64_t vd, int m, int ctx, int splits, int version, bool mixed = false, int balance = 1,
                     bool paged = false, int rows = 0) {
  const int64_t qh = nope + rope, kvw = L + rope, stride = (int64_t)ctx * kvw;
  pz_mla_params p = {};
  p.n_heads = heads; p.hidden = H; p.q_lora_rank = ql; p.kv_lora_rank = L; p.qk_nope_head_dim = nope;
  p.qk_rope_head_dim = rope; p.v_head_dim = vd; p.max_ctx = ctx; p.eps = 1e-6f;
  p.rope.theta = 10000; p.rope.factor = 4; p.rope.original_max_position_embeddings = 1024;
  p.rope.beta_fast = 32; p.rope.beta_slow = 1; p.rope.mscale = 1; p.rope.mscale_all_dim = 1;
  p.softmax_scale = pz_ref_mla_softmax_scale(nope, rope, &p.rope);
  auto qa_w = rbf(ql > 0 ? ql : 1, 0.1f, 1.0f), qb_w = rbf(ql > 0 ? heads * qh * ql : 1, 1.7f / sqrtf((float)(ql > 0 ? ql : 1)), 0);
  auto kva_w = rbf(L, 0.1f, 1.0f), w_uk = rbf(heads * nope * L, 1.7f / sqrtf((float)nope), 0);
  auto w_uv = rbf(heads * vd * L, 1.7f / sqrtf((float)L), 0), o_w = rbf(H * heads * vd, 1.7f / sqrtf((float)(heads * vd)), 0);
  const int64_t in_w = ql > 0 ? ql + kvw : heads * qh;
  std::vector<float> in((size_t)(m * in_w)), in2((size_t)(m * kvw));
  for (auto &x : in) x = 2.0f * uni();
  for (auto &x : in2) x = 2.0f * uni();
  std::vector<int32_t> pos((size_t)m);
  for (int i = 0; i < m; i++) pos[(size_t)i] = ctx - 1 - (i * 37) % (ctx / 2 + 1);
  /* mixed: one sequence of ctx tokens among short ones (1..45 tokens), so the balanced schedule gives
   * the long one more slices than `splits` (core/kv_sched.h) */
  if (mixed)
    for (int i = 1; i < m; i++) pos[(size_t)i] = (i * 53) % 45;
  /* rows (0 < rows < m): rows..m-1 pad the batch as the CUDA executor's do (pos = max_ctx - 1); they
   * attend position 0 only, and only the real rows' outputs are compared */
  const bool padded = rows > 0 && rows < m;
  if (padded)
    for (int i = rows; i < m; i++) pos[(size_t)i] = ctx - 1;
  std::vector<int32_t> pos_eff = pos; /* the lengths the attention sees: 1 for a padding row */
  if (padded)
    for (int i = rows; i < m; i++) pos_eff[(size_t)i] = 0;
  std::vector<uint16_t> cache0((size_t)(m * stride), 0xffff);
  for (int i = 0; i < m; i++)
    for (int64_t j = 0; j < (int64_t)pos[(size_t)i] * kvw; j++) cache0[(size_t)(i * stride + j)] = pz_f32_to_bf16(1.7f * uni());
  /* paged: the same rows in a pool of m * ceil(ctx / 64) pages of 64 rows, pages handed out in a
   * shuffled order (page b of sequence i at pool page table[i * nb + b]) */
  const int64_t nb = (ctx + PZ_KV_BLOCK - 1) / PZ_KV_BLOCK;
  std::vector<int32_t> table((size_t)(m * nb));
  if (paged) {
    for (int64_t p2 = 0; p2 < m * nb; p2++) table[(size_t)p2] = (int32_t)p2;
    for (int64_t p2 = m * nb - 1; p2 > 0; p2--) { /* Fisher-Yates: a permutation of the pages */
      rng ^= rng << 13; rng ^= rng >> 17; rng ^= rng << 5;
      std::swap(table[(size_t)p2], table[(size_t)(rng % (uint32_t)(p2 + 1))]);
    }
    std::vector<uint16_t> pool((size_t)(m * nb * PZ_KV_BLOCK * kvw), 0xffff);
    for (int i = 0; i < m; i++)
      for (int64_t j = 0; j < ctx; j++)
        for (int64_t c = 0; c < kvw; c++)
          pool[(size_t)(((int64_t)table[(size_t)(i * nb + j / PZ_KV_BLOCK)] * PZ_KV_BLOCK + j % PZ_KV_BLOCK) * kvw + c)] =
              cache0[(size_t)(i * stride + j * kvw + c)];
    cache0.swap(pool);
  }
  /* reference */
  std::vector<uint16_t> rc = cache0, gc = cache0;
  std::vector<float> ref((size_t)(m * H)), got((size_t)(m * H));
  pz_ref_mla_io io = {};
  if (ql > 0) { io.qkv_a = in.data(); io.ld_qkv_a = in_w; io.qa_norm_w = qa_w.data(); io.qb_w = qb_w.data(); }
  else { io.q = in.data(); io.ld_q = in_w; io.kv_a = in2.data(); io.ld_kv_a = kvw; }
  io.kva_norm_w = kva_w.data(); io.w_uk = w_uk.data(); io.w_uv = w_uv.data(); io.o_w = o_w.data();
  io.kv_cache = rc.data(); io.cache_seq_stride = stride; io.pos = pos.data();
  if (paged) { io.block_table = table.data(); io.ld_block_table = nb; io.n_pages = m * nb; }
  io.out = ref.data(); io.ld_out = H; io.out_zero_init = true;
  if (pz_ref_mla_decode(m, &p, &io) != PZ_OK) { printf("reference failed\n"); failures++; return; }
  /* emulated kernels */
  std::vector<uint16_t> qcn((size_t)(m * (ql > 0 ? ql : 1))), qabs((size_t)(m * heads * kvw), 0x7fc0), o((size_t)(m * heads * vd), 0x7fc0);
  std::vector<float> q((size_t)(m * heads * qh)), opart((size_t)(m * splits * heads * L), NAN), ml((size_t)(m * splits * heads * 2), NAN),
      olat((size_t)(m * heads * L), NAN);
  Kp k = {};
  k.m = m; k.heads = heads; k.L = (int)L; k.rope = (int)rope; k.nope = (int)nope; k.vd = (int)vd; k.qh = (int)qh; k.kvw = (int)kvw;
  k.q_lora = (int)ql; k.eps = p.eps; k.softmax_scale = p.softmax_scale; k.rope_ms = pz_ref_yarn_cos_sin_mscale(&p.rope);
  pz_ref_yarn_inv_freq(&p.rope, rope, k.inv_freq);
  k.qkv_a = ql > 0 ? in.data() : nullptr; k.ld_qkv_a = in_w; k.kv_a = ql > 0 ? nullptr : in2.data(); k.ld_kv_a = kvw;
  k.qa_norm_w = qa_w.data(); k.kva_norm_w = kva_w.data(); k.qcn = qcn.data(); k.cache = gc.data(); k.cache_seq_stride = stride;
  if (paged) { k.block_table = table.data(); k.ld_bt = nb; }
  k.pos = pos.data(); k.w_uk = w_uk.data(); k.qabs = qabs.data(); k.splits = splits; k.opart = opart.data(); k.ml = ml.data();
  k.olat = olat.data(); k.w_uv = w_uv.data(); k.o = o.data(); k.attn_version = version;
  std::vector<int32_t> sched((size_t)m + 1, -1);
  k.sched = sched.data();
  k.balance = balance;
  const int32_t rows_dev = rows;
  k.rows = rows > 0 ? &rows_dev : nullptr;
  k.mt = version == 2 ? (heads <= 16 ? 1 : 2) : (heads <= 16 ? 1 : heads <= 32 ? 2 : 4);
  emu_launch(dim3((unsigned)m, 2), dim3(256), 0, [&] { mla_prep_kernel(k); });
  if (ql > 0) {
    pz_ref_gemm(m, heads * qh, ql, qcn.data(), ql, qb_w.data(), ql, nullptr, q.data(), heads * qh, 0, true);
    k.q = q.data(); k.ldq = heads * qh;
  } else {
    k.q = in.data(); k.ldq = in_w;
  }
  emu_launch(dim3((unsigned)heads, (unsigned)((m + 15) / 16), (unsigned)((L + 63) / 64)), dim3(256),
             (size_t)16 * nope * 4 + (size_t)nope * 64 * 2, [&] { mla_absorb_kernel(k); });
  attn_fn f = pick_attn(version, k.mt, (int)L, (int)kvw);
  if (!f) { printf("%s: no kernel\n", name); failures++; return; }
  const unsigned hg = (unsigned)((heads + 16 * k.mt - 1) / (16 * k.mt));
  dim3 grid = version == 2 ? dim3(hg, (unsigned)splits, (unsigned)m) : dim3((unsigned)splits, hg, (unsigned)m);
  emu_launch(grid, dim3((unsigned)(128 * k.mt)), smem_for(version, k.mt, (int)kvw), [&] { f(k); });
  std::vector<int32_t> want((size_t)m + 1);
  pz_kv_sched(pos_eff.data(), m, splits, PZ_MLA_MAX_SPLITS, want.data());
  if (balance && sched != want) {
    printf("FAIL %s: the attention kernel's schedule differs from pz_kv_sched\n", name);
    failures++;
  }
  if (!balance && padded) /* former split: a padding row's one position is its first chunk; the others are empty */
    for (int i = rows; i < m; i++)
      for (int s = 1; s < splits; s++)
        if (ml[(size_t)(((int64_t)i * splits + s) * heads * 2)] != -INFINITY) {
          printf("FAIL %s: padding row %d's chunk %d is not empty\n", name, i, s);
          failures++;
          s = splits, i = m;
        }
  emu_launch(dim3((unsigned)m, (unsigned)heads), dim3(128), 0, [&] { mla_combine_kernel(k); });
  emu_launch(dim3((unsigned)heads, (unsigned)((m + 15) / 16), (unsigned)((vd + 63) / 64)), dim3(256),
             (size_t)16 * L * 4 + (size_t)L * 64 * 2, [&] { mla_wuv_kernel(k); });
  pz_ref_gemm(m, H, heads * vd, o.data(), heads * vd, o_w.data(), heads * vd, nullptr, got.data(), H, 0, true);
  /* compare */
  int64_t far = 0, ulp = 0;
  for (int i = 0; i < m; i++)
    for (int64_t j = 0; j < stride; j++) {
      const int64_t row = j / kvw, col = j % kvw;
      const size_t at = paged ? (size_t)((((int64_t)table[(size_t)(i * nb + row / PZ_KV_BLOCK)]) * PZ_KV_BLOCK + row % PZ_KV_BLOCK) * kvw + col)
                              : (size_t)(i * stride + j);
      uint16_t a = rc[at], b = gc[at];
      if (a == b) continue;
      if (row == pos[(size_t)i] && !((a ^ b) & 0x8000) && abs((int)a - (int)b) == 1) ulp++;
      else far++;
    }
  double worst = 0;
  int bad_o = 0;
  for (int i = 0; i < m; i++) {
    double se = 0, sr = 0;
    for (int64_t j = 0; j < H; j++) {
      double r = ref[(size_t)(i * H + j)], g = got[(size_t)(i * H + j)];
      se += (g - r) * (g - r);
      sr += r * r;
      if (!std::isfinite(g)) bad_o++;
    }
    if (!padded || i < rows) worst = std::max(worst, sqrt(se / sr)); /* a padding row: finite only */
  }
  const bool ok = far == 0 && bad_o == 0 && worst <= 1.5e-2;
  if (!ok) failures++;
  char pad[48] = "";
  if (padded) snprintf(pad, sizeof pad, " rows %d real", rows);
  printf("%s %-14s v%d m=%d ctx=%d splits=%d%s%s%s: rms err %.2e, cache far %lld ulp %lld, non-finite %d\n", ok ? "ok  " : "FAIL",
         name, version, m, ctx, splits, balance ? "" : " (former split)", paged ? " paged" : "", pad, worst, (long long)far,
         (long long)ulp, bad_o);
}

int main(int argc, char **argv) {
  const int quick = argc > 1;
  for (int v = 2; v >= 1; v--) {
    run_case("tiny tp1", 8, 512, 128, 96, 32, 32, 64, 3, 40, 2, v);
    run_case("tiny tp4", 2, 512, 128, 96, 32, 32, 64, 2, 1, 3, v);
    run_case("k2 tp4", 16, 512, 256, 512, 128, 64, 128, 2, 70, 2, v);
    run_case("tiny mixed", 8, 512, 128, 96, 32, 32, 64, 6, 400, 2, v, true);
    run_case("k2 tp4 mixed", 16, 256, 128, 512, 128, 64, 128, 4, 300, 3, v, true);
    run_case("mixed unbal.", 8, 512, 128, 96, 32, 32, 64, 6, 400, 2, v, true, 0); /* PREZERO_MLA_BALANCE=0 */
    run_case("mixed paged", 8, 512, 128, 96, 32, 32, 64, 6, 400, 2, v, true, 1, true);
    run_case("paged former", 8, 512, 128, 96, 32, 32, 64, 6, 400, 2, v, true, 0, true);
    run_case("paged uniform", 8, 512, 128, 96, 32, 32, 64, 3, 40, 2, v, false, 0, true);
    /* a batch of 5 padded to 8 (the executor's rows): real rows against the reference, the schedule
     * with the padding rows at one position; balanced and former split, contiguous and paged */
    run_case("padded 5/8", 8, 512, 128, 96, 32, 32, 64, 8, 300, 2, v, true, 1, false, 5);
    run_case("padded former", 8, 512, 128, 96, 32, 32, 64, 8, 300, 2, v, true, 0, false, 5);
    run_case("padded paged", 8, 512, 128, 96, 32, 32, 64, 8, 300, 3, v, false, 1, true, 3);
    if (!quick) {
      run_case("v2-lite", 16, 256, 0, 512, 128, 64, 128, 1, 33, 3, v);
      run_case("k2 tp2", 32, 256, 128, 512, 128, 64, 128, 1, 40, 1, v);
      run_case("k2 tp1", 64, 256, 128, 512, 128, 64, 128, 1, 35, 2, v);
      run_case("k2 tp4 m17", 16, 256, 128, 512, 128, 64, 128, 17, 5, 1, v);
      /* the schedule's scan past 32 sequences, one slice each (splits 1), and 64 */
      run_case("tiny m33 mixed", 8, 512, 128, 96, 32, 32, 64, 33, 300, 2, v, true);
      run_case("tiny m70 mixed", 8, 512, 128, 96, 32, 32, 64, 70, 200, 2, v, true);
      run_case("tiny m40 s1", 8, 512, 128, 96, 32, 32, 64, 40, 200, 1, v, true);
      run_case("tiny m5 s64", 8, 512, 128, 96, 32, 32, 64, 5, 900, 64, v, true);
    }
  }
  printf(failures ? "%d case(s) failed\n" : "all cases passed\n", failures);
  return failures != 0;
}
