/* pz_gemm_resolve, the one GEMM choice, needs no GPU (runs in any CUDA build): it is a pure
 * function of its target (SM count, Hopper flag, tuner table, options, forced flavour) and the
 * shape, whatever the environment holds; AUTO follows force > option > table > heuristic; a
 * prezero consumer keeps the baseline's config minus its zeroing; nothing is clamped silently:
 * a table entry, a caller's config or an option the kernels cannot run is refused, naming it. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/gemm.h"
#include "backend/cuda/tuner.h"
#include "core/options.h"
#include "pz_test.h"

static pz_gemm_config resolve_ok(const pz_gemm_target *t, int m, int n, int k, bool zi, const pz_gemm_config *want) {
  pz_gemm_config c;
  memset(&c, 0, sizeof c);
  CHECK_OK(pz_gemm_resolve(t, m, n, k, zi, want, &c));
  return c;
}

/* A tuner-table entry for (m bucket, n, k) with only its cuBLAS config set; the caller adds the rest. */
static pz_tuner_entry entry_for(int m_bucket, int n, int k) {
  pz_tuner_entry e;
  memset(&e, 0, sizeof e);
  e.m_bucket = m_bucket;
  e.n = n;
  e.k = k;
  e.cfg[PZ_GEMM_CUBLAS] = (pz_gemm_config){PZ_GEMM_CUBLAS, 1, 1, 4, 0, 0};
  return e;
}

static bool same(const pz_gemm_config *a, const pz_gemm_config *b) {
  return a->flavour == b->flavour && a->splits == b->splits && a->wt == b->wt && a->warps == b->warps && a->wn == b->wn &&
         a->bn == b->bn;
}

int main(void) {
  pz_runtime_opts ro;
  pz_runtime_opts_default(&ro);
  pz_tuner_table tab;
  CHECK_OK(pz_tuner_table_init(&tab, "Test GPU", 132, "/nonexistent/prezero_cache", 0));
  CHECK(tab.count == 0);
  pz_gemm_target t = {.sm_count = 132, .hopper = true, .table = &tab, .ro = &ro, .force = PZ_GEMM_AUTO};

  /* No table entry: the heuristic, whatever the environment says (pure). */
  setenv("PREZERO_GEMM_FORCE", "cublas", 1);
  setenv("PREZERO_GEMM_SPLITS", "3", 1);
  pz_gemm_config h = pz_gemm_heuristic(132, 8, 2112, 7168, true, true);
  pz_gemm_config c = resolve_ok(&t, 8, 2112, 7168, true, NULL);
  if (h.flavour == PZ_GEMM_SPLITK_ATOMIC) h.flavour = PZ_GEMM_MEMSET_SPLITK;
  CHECK(same(&c, &h));
  unsetenv("PREZERO_GEMM_FORCE");
  unsetenv("PREZERO_GEMM_SPLITS");

  /* A prezero consumer (zero_init = false): the baseline's config, its zeroing dropped. */
  pz_gemm_config base = resolve_ok(&t, 8, 2112, 7168, true, NULL);
  pz_gemm_config cons = resolve_ok(&t, 8, 2112, 7168, false, NULL);
  CHECK(cons.splits == base.splits && cons.wt == base.wt && cons.wn == base.wn);
  CHECK((base.flavour == PZ_GEMM_SPLITK_ZERO || base.flavour == PZ_GEMM_MEMSET_SPLITK) ? cons.flavour == PZ_GEMM_SPLITK_ATOMIC
                                                                                         : cons.flavour == base.flavour);

  /* The table decides when it has the shape; the forced flavour of the options beats it, and
   * the handle's force (baselines) beats both. */
  pz_tuner_entry e = entry_for(8, 2112, 7168);
  e.cfg[PZ_GEMM_SPLITK_ZERO] = (pz_gemm_config){PZ_GEMM_SPLITK_ZERO, 6, 1, 5, 3, 0};
  e.cfg[PZ_GEMM_SPLITK_ATOMIC] = (pz_gemm_config){PZ_GEMM_SPLITK_ATOMIC, 6, 1, 5, 3, 0};
  e.cfg[PZ_GEMM_FULLK] = (pz_gemm_config){PZ_GEMM_FULLK, 1, 2, 5, 3, 0};
  e.best_zero = PZ_GEMM_SPLITK_ZERO;
  e.best_nozero = PZ_GEMM_SPLITK_ATOMIC;
  CHECK_OK(pz_tuner_put(&tab, &e));
  c = resolve_ok(&t, 7, 2112, 7168, true, NULL); /* m 7 -> bucket 8 */
  CHECK(c.flavour == PZ_GEMM_SPLITK_ZERO && c.splits == 6 && c.wn == 3);
  snprintf(ro.gemm_force, sizeof ro.gemm_force, "fullk");
  c = resolve_ok(&t, 8, 2112, 7168, true, NULL);
  CHECK(c.flavour == PZ_GEMM_FULLK && c.splits == 1 && c.wt == 2);
  t.force = PZ_GEMM_CUBLAS;
  c = resolve_ok(&t, 8, 2112, 7168, true, NULL);
  CHECK(c.flavour == PZ_GEMM_CUBLAS);
  t.force = PZ_GEMM_AUTO;
  ro.gemm_force[0] = 0;
  /* the table off (PREZERO_GEMM_TUNER=0): the heuristic again */
  ro.gemm_tuner = 0;
  c = resolve_ok(&t, 8, 2112, 7168, true, NULL);
  CHECK(same(&c, &h));
  ro.gemm_tuner = 1;

  /* PREZERO_GEMM_SPLITS: obeyed, capped at the GEMM's k-blocks (7168 / 64 = 112; 128 / 64 = 2). */
  ro.gemm_splits = 3;
  c = resolve_ok(&t, 8, 2112, 7168, true, NULL);
  CHECK(c.splits == 3);
  ro.gemm_splits = 40;
  snprintf(ro.gemm_force, sizeof ro.gemm_force, "atomic");
  c = resolve_ok(&t, 8, 256, 128, false, NULL);
  CHECK(c.flavour == PZ_GEMM_SPLITK_ATOMIC && c.splits == 2);
  ro.gemm_force[0] = 0;
  c = resolve_ok(&t, 8, 256, 128, true, NULL); /* the heuristic runs it whole: full K has one split */
  CHECK(c.flavour != PZ_GEMM_FULLK || c.splits == 1);
  ro.gemm_splits = -1;

  /* Refused, never clamped: a table entry that cannot run, a caller's config, wgmma off Hopper. */
  e.cfg[PZ_GEMM_SPLITK_ZERO].splits = 500; /* > 112 k-blocks */
  CHECK_OK(pz_tuner_put(&tab, &e));
  CHECK_ST(pz_gemm_resolve(&t, 8, 2112, 7168, true, NULL, &c), PZ_ERR_INVALID_ARG);
  CHECK(strstr(pz_last_error(), "the tuner table") && strstr(pz_last_error(), "splits=500"));
  pz_gemm_config bad = {PZ_GEMM_SPLITK_ATOMIC, 2, 3, 0, 3, 0}; /* wt 3 */
  CHECK_ST(pz_gemm_resolve(&t, 8, 4096, 4096, false, &bad, &c), PZ_ERR_INVALID_ARG);
  CHECK(strstr(pz_last_error(), "the caller's config"));
  pz_gemm_target old = t;
  old.hopper = false;
  old.table = NULL;
  pz_gemm_config wg = {PZ_GEMM_SPLITK_ATOMIC, 2, 1, 4, 3, 0};
  CHECK_ST(pz_gemm_resolve(&old, 8, 4096, 4096, false, &wg, &c), PZ_ERR_INVALID_ARG);
  CHECK(strstr(pz_last_error(), "Hopper"));
  /* an explicit config that can run is returned as given */
  pz_gemm_config ex = {PZ_GEMM_SPLITK_SERIAL, 4, 2, 4, 0, 0};
  c = resolve_ok(&old, 8, 4096, 4096, false, &ex);
  CHECK(same(&c, &ex));
  /* a forced split-K flavour on a one-k-block GEMM keeps its one split (k 64 on wgmma) */
  snprintf(ro.gemm_force, sizeof ro.gemm_force, "memset");
  c = resolve_ok(&t, 1, 64, 64, true, NULL);
  CHECK(c.flavour == PZ_GEMM_MEMSET_SPLITK && c.splits == 1);
  /* a malformed forced flavour */
  snprintf(ro.gemm_force, sizeof ro.gemm_force, "bogus");
  CHECK_ST(pz_gemm_resolve(&old, 8, 4096, 4096, true, NULL, &c), PZ_ERR_INVALID_ARG);
  CHECK(strstr(pz_last_error(), "PREZERO_GEMM_FORCE=bogus"));
  ro.gemm_force[0] = 0;

  /* The stream-K kernel (wn 4, splits = its CTA count) from the table: a prezero consumer keeps
   * it; a fixed split count (the deterministic mode's PREZERO_GEMM_SPLITS=2) runs the split-K
   * kernel instead; PREZERO_GEMM_WN=4 asks for it with one CTA per SM; it takes only the atomic
   * flavours. */
  pz_tuner_entry sk = entry_for(32, 7168, 8192);
  sk.cfg[PZ_GEMM_SPLITK_ATOMIC] = (pz_gemm_config){PZ_GEMM_SPLITK_ATOMIC, 132, 2, 9, 4, 0};
  sk.cfg[PZ_GEMM_MEMSET_SPLITK] = (pz_gemm_config){PZ_GEMM_MEMSET_SPLITK, 132, 2, 9, 4, 0};
  sk.cfg[PZ_GEMM_SPLITK_ZERO] = (pz_gemm_config){PZ_GEMM_SPLITK_ZERO, 4, 2, 9, 3, 0};
  sk.best_zero = PZ_GEMM_MEMSET_SPLITK;
  sk.best_nozero = PZ_GEMM_SPLITK_ATOMIC;
  CHECK_OK(pz_tuner_put(&tab, &sk));
  c = resolve_ok(&t, 32, 7168, 8192, true, NULL);
  CHECK(c.flavour == PZ_GEMM_MEMSET_SPLITK && c.wn == 4 && c.splits == 132 && c.wt == 2);
  c = resolve_ok(&t, 32, 7168, 8192, false, NULL);
  CHECK(c.flavour == PZ_GEMM_SPLITK_ATOMIC && c.wn == 4 && c.splits == 132);
  ro.gemm_splits = 2;
  c = resolve_ok(&t, 32, 7168, 8192, false, NULL);
  CHECK(c.flavour == PZ_GEMM_SPLITK_ATOMIC && c.wn == 3 && c.splits == 2 && c.wt == 2);
  ro.gemm_splits = -1;
  ro.gemm_wn = 4; /* on a shape the table lacks: the heuristic's tile, one CTA per SM */
  c = resolve_ok(&t, 16, 4096, 4096, false, NULL);
  CHECK(c.wn == 4 && c.splits == 132 && c.flavour == PZ_GEMM_SPLITK_ATOMIC);
  ro.gemm_wn = 3; /* and back: the split-K kernel gets a split count it can run */
  c = resolve_ok(&t, 32, 7168, 8192, false, NULL);
  CHECK(c.wn == 3 && c.splits >= 1 && c.splits <= 8192 / 64);
  ro.gemm_wn = -1;

  /* A token tile below m (config bn) from the table: AUTO keeps it, a prezero consumer too (the same
   * kernel minus its zeroing); PREZERO_GEMM_BN=0 (the off switch) takes all m tokens again, =32 forces
   * that tile; another kernel (PREZERO_GEMM_WN=0) drops the tuned tile; a caller's bn on a kernel
   * without one is refused. */
  pz_tuner_entry tb = entry_for(256, 2048, 256);
  tb.cfg[PZ_GEMM_FULLK] = (pz_gemm_config){PZ_GEMM_FULLK, 1, 1, 5, 3, 64};
  tb.cfg[PZ_GEMM_SPLITK_ATOMIC] = (pz_gemm_config){PZ_GEMM_SPLITK_ATOMIC, 2, 1, 5, 3, 64};
  tb.cfg[PZ_GEMM_SPLITK_ZERO] = (pz_gemm_config){PZ_GEMM_SPLITK_ZERO, 2, 1, 5, 3, 64};
  tb.best_zero = PZ_GEMM_FULLK;
  tb.best_nozero = PZ_GEMM_FULLK;
  CHECK_OK(pz_tuner_put(&tab, &tb));
  c = resolve_ok(&t, 256, 2048, 256, true, NULL);
  CHECK(c.flavour == PZ_GEMM_FULLK && c.wn == 3 && c.bn == 64);
  c = resolve_ok(&t, 256, 2048, 256, false, NULL);
  CHECK(c.flavour == PZ_GEMM_FULLK && c.bn == 64);
  ro.gemm_bn = 0;
  c = resolve_ok(&t, 256, 2048, 256, true, NULL);
  CHECK(c.flavour == PZ_GEMM_FULLK && c.wn == 3 && c.bn == 0);
  /* no table entry: PREZERO_GEMM_BN=0 gets the heuristic's split count for one tile of all m
   * tokens (m 256, n 2048, k 7168: 4 splits), not the one it chose for tiles of 64 (2 splits,
   * which with one 256-token tile would leave half the SMs idle) */
  {
    const pz_gemm_config tiled = pz_gemm_heuristic(132, 256, 2048, 7168, true, true);
    const pz_gemm_config whole = pz_gemm_heuristic_tiles(132, 256, 2048, 7168, true, true, false);
    CHECK(tiled.bn == 64 && whole.bn == 0 && tiled.splits == 2 && whole.splits == 4);
    c = resolve_ok(&t, 256, 2048, 7168, true, NULL);
    CHECK(c.bn == 0 && c.splits == whole.splits && c.wt == whole.wt);
    ro.gemm_bn = -1;
    c = resolve_ok(&t, 256, 2048, 7168, true, NULL);
    CHECK(c.bn == 64 && c.splits == tiled.splits);
    ro.gemm_bn = 0;
  }
  ro.gemm_bn = 32;
  c = resolve_ok(&t, 256, 2048, 256, true, NULL);
  CHECK(c.bn == 32);
  ro.gemm_bn = -1;
  pz_gemm_config other = {PZ_GEMM_FULLK, 0, 0, 8, 0, 0}; /* the mma.sync kernel asked for: the table's tile is dropped */
  c = resolve_ok(&t, 256, 2048, 256, true, &other);
  CHECK(c.wn == 0 && c.bn == 0 && c.warps == 8);
  pz_gemm_config bnbad = {PZ_GEMM_FULLK, 1, 1, 8, 0, 64};
  CHECK_ST(pz_gemm_resolve(&t, 256, 2048, 256, true, &bnbad, &c), PZ_ERR_INVALID_ARG);
  CHECK(strstr(pz_last_error(), "token tile"));
  pz_gemm_config bn48 = {PZ_GEMM_FULLK, 1, 1, 5, 3, 48};
  CHECK_ST(pz_gemm_resolve(&t, 256, 2048, 256, true, &bn48, &c), PZ_ERR_INVALID_ARG);
  /* a caller naming the kernel (warps > 0) gets the tile it names: bn 0 is one tile of all m tokens, not
   * the table's 64 (the tuner and bench time their candidates this way); a flavour alone keeps the table's */
  pz_gemm_config full0 = {PZ_GEMM_SPLITK_ATOMIC, 2, 1, 5, 3, 0};
  c = resolve_ok(&t, 256, 2048, 256, false, &full0);
  CHECK(c.bn == 0 && c.splits == 2 && c.wn == 3);
  pz_gemm_config flav = {PZ_GEMM_SPLITK_ATOMIC, 0, 0, 0, 0, 0};
  c = resolve_ok(&t, 256, 2048, 256, false, &flav);
  CHECK(c.bn == 64);
  /* a tile on stream-K or cuBLAS is refused, not ignored */
  pz_gemm_config skbn = {PZ_GEMM_SPLITK_ATOMIC, 132, 1, 5, 4, 64};
  CHECK_ST(pz_gemm_resolve(&t, 256, 2048, 256, false, &skbn, &c), PZ_ERR_INVALID_ARG);
  pz_gemm_config cubn = {PZ_GEMM_CUBLAS, 1, 1, 4, 0, 64};
  CHECK_ST(pz_gemm_resolve(&t, 256, 2048, 256, false, &cubn, &c), PZ_ERR_INVALID_ARG);
  CHECK(strstr(pz_last_error(), "bn=64"));
  /* the heuristic's token tile: 64 on the wgmma kernel from m = 128 for n <= 2048 with one W tile per
   * CTA (gemm.c, heuristic_wgmma), none below m = 128, above n = 2048 or on the mma.sync kernels */
  CHECK(pz_gemm_heuristic(132, 256, 2048, 256, false, false).bn == 0);
  CHECK(pz_gemm_heuristic(132, 256, 2048, 256, false, true).bn == 64);
  CHECK(pz_gemm_heuristic(132, 128, 576, 2048, false, true).bn == 64);
  CHECK(pz_gemm_heuristic(132, 64, 576, 2048, false, true).bn == 0);
  CHECK(pz_gemm_heuristic(132, 256, 7168, 8192, false, true).bn == 0);
  /* every heuristic pick resolves: a valid config on the kernel it names */
  for (int mm = 1; mm <= 256; mm *= 2) {
    const int shapes[][2] = {{64, 2048}, {576, 2048}, {2048, 256}, {2048, 2048}, {2112, 7168}, {7168, 8192}, {24576, 1536}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
      pz_gemm_config h = pz_gemm_heuristic(132, mm, shapes[i][0], shapes[i][1], false, true), r;
      h.warps = h.warps > 0 ? h.warps : 5;
      CHECK_ST(pz_gemm_resolve(&t, mm, shapes[i][0], shapes[i][1], false, &h, &r), PZ_OK);
      CHECK(r.bn == h.bn && r.splits == h.splits && r.wt == h.wt);
    }
  }
  /* the table reader drops a tile the kernels cannot run (bn 8, or bn on another kernel) */
  {
    pz_tuner_table rt;
    CHECK_OK(pz_tuner_table_init(&rt, "Test GPU", 132, "/nonexistent/prezero_cache", 0));
    static const char *bad_tiles =
        "{\"device\":\"Test GPU\",\"sm_count\":132,\"entries\":[{\"m\":256,\"n\":2048,\"k\":256,\"flavours\":{"
        "\"atomic\":{\"splits\":2,\"wt\":1,\"warps\":5,\"wn\":3,\"bn\":8,\"us\":1},"
        "\"fullk\":{\"splits\":1,\"wt\":1,\"warps\":8,\"wn\":0,\"bn\":64,\"us\":1},"
        "\"serial\":{\"splits\":2,\"wt\":1,\"warps\":5,\"wn\":3,\"bn\":64,\"us\":1},"
        "\"zero\":{\"splits\":2,\"wt\":1,\"warps\":4,\"wn\":2,\"us\":1}},"
        "\"best_nozero\":\"serial\",\"best_zero\":\"serial\"}]}";
    int dropped = -1;
    CHECK_OK(pz_tuner_table_load_text(&rt, bad_tiles, strlen(bad_tiles), &dropped));
    /* ... and a config of the removed staged kernel (wn 2) from an older table */
    CHECK(dropped == 3 && rt.count == 1 && rt.e[0].cfg[PZ_GEMM_SPLITK_SERIAL].bn == 64 &&
          rt.e[0].cfg[PZ_GEMM_SPLITK_ATOMIC].splits == 0 && rt.e[0].cfg[PZ_GEMM_SPLITK_ZERO].splits == 0);
    pz_tuner_table_free(&rt);
  }
  char dbn[96];
  pz_gemm_config_describe(&tb.cfg[PZ_GEMM_FULLK], dbn, sizeof dbn);
  CHECK(!strcmp(dbn, "wgmma fullk splits=1 wt=1 bn=64"));
  pz_gemm_config st2 = {PZ_GEMM_SPLITK_ATOMIC, 2, 1, 4, 2, 0}; /* the removed staged kernel */
  CHECK_ST(pz_gemm_resolve(&t, 8, 2048, 256, false, &st2, &c), PZ_ERR_INVALID_ARG);
  CHECK(strstr(pz_last_error(), "wn 2"));
  pz_gemm_config skz = {PZ_GEMM_SPLITK_ZERO, 132, 2, 9, 4, 0};
  CHECK_ST(pz_gemm_resolve(&t, 32, 7168, 8192, true, &skz, &c), PZ_ERR_INVALID_ARG);
  CHECK(strstr(pz_last_error(), "stream-K"));
  pz_gemm_config skold = {PZ_GEMM_SPLITK_ATOMIC, 132, 2, 9, 4, 0};
  CHECK_ST(pz_gemm_resolve(&old, 32, 7168, 8192, false, &skold, &c), PZ_ERR_INVALID_ARG);
  char desc[96];
  pz_gemm_config_describe(&skold, desc, sizeof desc);
  CHECK(!strcmp(desc, "wgmma stream-K atomic ctas=132 wt=2"));

  /* The wgmma token split (wn 3, wt 1, warps 9): a table entry keeps it; a tile forced by
   * PREZERO_GEMM_WT, or a caller's config with a tile and no warps, gets the plain kernel of that
   * tile (warps 5 at wt 1), never the split a wt 2 entry's warps 9 would otherwise select. */
  pz_tuner_entry ts = entry_for(128, 7168, 2048);
  ts.cfg[PZ_GEMM_FULLK] = (pz_gemm_config){PZ_GEMM_FULLK, 1, 1, 9, 3, 0};
  ts.cfg[PZ_GEMM_SPLITK_ZERO] = (pz_gemm_config){PZ_GEMM_SPLITK_ZERO, 2, 2, 9, 3, 0};
  ts.cfg[PZ_GEMM_SPLITK_ATOMIC] = (pz_gemm_config){PZ_GEMM_SPLITK_ATOMIC, 2, 2, 9, 3, 0};
  ts.best_zero = PZ_GEMM_FULLK;
  ts.best_nozero = PZ_GEMM_FULLK;
  CHECK_OK(pz_tuner_put(&tab, &ts));
  c = resolve_ok(&t, 128, 7168, 2048, true, NULL);
  CHECK(c.flavour == PZ_GEMM_FULLK && pz_gemm_wgmma_token_split(&c));
  pz_gemm_config_describe(&c, desc, sizeof desc);
  CHECK(!strcmp(desc, "wgmma fullk splits=1 wt=1 token-split"));
  snprintf(ro.gemm_force, sizeof ro.gemm_force, "atomic"); /* the wt 2, warps 9 entry (zero_init: its memset form) */
  ro.gemm_wt = 1;
  c = resolve_ok(&t, 128, 7168, 2048, true, NULL);
  CHECK(c.flavour == PZ_GEMM_MEMSET_SPLITK && c.wt == 1 && c.warps == 5 && !pz_gemm_wgmma_token_split(&c));
  ro.gemm_wt = -1;
  ro.gemm_force[0] = 0;
  pz_gemm_config tile_only = {PZ_GEMM_SPLITK_ATOMIC, 2, 1, 0, 3, 0};
  c = resolve_ok(&t, 128, 7168, 2048, false, &tile_only);
  CHECK(!pz_gemm_wgmma_token_split(&c));
  pz_gemm_config split_given = {PZ_GEMM_SPLITK_ATOMIC, 2, 1, 9, 3, 0};
  c = resolve_ok(&t, 128, 7168, 2048, false, &split_given);
  CHECK(pz_gemm_wgmma_token_split(&c) && c.splits == 2);
  pz_tuner_table_free(&tab);

  /* The built-in H200 table ships token tiles (bn): a handle planning for that device (no GPU touched,
   * empty cache) resolves a forced-atomic GEMM of such an entry to the entry's tile. */
  setenv("PREZERO_CACHE_DIR", "/nonexistent/prezero_cache_for_builtin", 1);
  pz_gemm_ctx *hb = NULL;
  CHECK_OK(pz_gemm_ctx_create_model("NVIDIA H200", 132, true, &hb));
  unsetenv("PREZERO_CACHE_DIR");
  if (hb) {
    const pz_tuner_table *bt = pz_gemm_ctx_table(hb);
    CHECK(!strcmp(bt->source, "built-in"));
    const pz_tuner_entry *tiled = NULL;
    for (int i = 0; i < bt->count && !tiled; i++)
      if (bt->e[i].cfg[PZ_GEMM_SPLITK_ATOMIC].splits > 0 && bt->e[i].cfg[PZ_GEMM_SPLITK_ATOMIC].bn > 0) tiled = &bt->e[i];
    CHECK(tiled != NULL);
    if (tiled) {
      CHECK(tiled->m_bucket > 64 && tiled->cfg[PZ_GEMM_SPLITK_ATOMIC].bn < tiled->m_bucket);
      CHECK_OK(pz_gemm_ctx_set_force(hb, PZ_GEMM_SPLITK_ATOMIC));
      pz_gemm_config ct;
      bool sk = false;
      CHECK_OK(pz_gemm_choose(hb, tiled->m_bucket, tiled->n, tiled->k, false, &ct, &sk));
      CHECK(sk && ct.wn == 3 && ct.bn == tiled->cfg[PZ_GEMM_SPLITK_ATOMIC].bn &&
            ct.splits == tiled->cfg[PZ_GEMM_SPLITK_ATOMIC].splits);
    }
    pz_gemm_ctx_destroy(hb);
  }
  TEST_DONE();
}
