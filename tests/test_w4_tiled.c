/* The tiled INT4 layout's maps (src/backend/cuda/w4_tiled.h, host and device code), on the CPU:
 * - the word and scale maps are bijections of [0, N*K/8) and [0, N*K/32) for several shapes;
 * - a warp lane's 16-byte unit holds what the kernel's fragment needs: lane 4g + c, row half h of
 *   super-chunk sc has word c of groups 4sc..4sc+3 of row 16b + 8h + g, in order;
 * - the nibble permutation puts columns (2i, 2i+1) in nibbles (i, i+4) and is undone by its inverse
 *   (checked on every 16-bit pattern of the low and high halves, then 10^6 random words);
 * - the shape rule. Exact integer checks; no GPU needed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/w4_tiled.h"
#include "pz_test.h"

static void bijection(int64_t N, int64_t K) {
  const int64_t nw = N * (K / 8), ns = N * (K / 32);
  unsigned char *hit = calloc((size_t)nw, 1), *hs = calloc((size_t)ns, 1);
  int64_t bad = 0;
  for (int64_t r = 0; r < N; r++) {
    for (int64_t w = 0; w < K / 8; w++) {
      const int64_t i = pz_w4t_word_index(K, r, w);
      if (i < 0 || i >= nw || hit[i]++) bad++;
      /* the unit: 16 bytes of lane l = 4g + c in half h of (b, sc) */
      const int64_t b = r / 16, h = (r % 16) / 8, g = r % 8, sc = w / 16, G = (w % 16) / 4, c = w % 4;
      if (i / 4 != ((b * (K / 128) + sc) * 2 + h) * 32 + 4 * g + c || i % 4 != G) bad++;
    }
    for (int64_t q = 0; q < K / 32; q++) {
      const int64_t i = pz_w4t_scale_index(K, r, q);
      if (i < 0 || i >= ns || hs[i]++) bad++;
      const int64_t b = r / 16, h = (r % 16) / 8, g = r % 8;
      if (i / 8 != (b * (K / 128) + q / 4) * 8 + g || i % 8 != 2 * (q % 4) + h) bad++;
    }
  }
  CHECK(bad == 0);
  free(hit);
  free(hs);
}

int main(void) {
  bijection(16, 128);
  bijection(64, 256);
  bijection(128, 7168);
  bijection(7168, 512);
  CHECK(pz_w4t_shape_ok(16, 128) && pz_w4t_shape_ok(2048, 7168));
  CHECK(!pz_w4t_shape_ok(8, 128) && !pz_w4t_shape_ok(16, 64) && !pz_w4t_shape_ok(0, 128) && !pz_w4t_shape_ok(16, 96));
  /* nibble placement: column j of the word at nibble (j even: j/2, odd: j/2 + 4) */
  for (int j = 0; j < 8; j++) {
    const uint32_t w = 0x9u << (4 * j), want = 0x9u << (4 * (j % 2 ? j / 2 + 4 : j / 2));
    CHECK(pz_w4t_perm(w) == want);
  }
  int bad = 0;
  for (uint32_t v = 0; v < 65536; v++) {
    bad += pz_w4t_unperm(pz_w4t_perm(v)) != v;
    bad += pz_w4t_unperm(pz_w4t_perm(v << 16)) != v << 16;
  }
  uint32_t x = 2463534242u;
  for (int i = 0; i < 1000000; i++) {
    x ^= x << 13; x ^= x >> 17; x ^= x << 5;
    bad += pz_w4t_unperm(pz_w4t_perm(x)) != x || pz_w4t_perm(pz_w4t_unperm(x)) != x;
  }
  CHECK(bad == 0);
  TEST_DONE();
}
