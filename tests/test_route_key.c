/* route_key.h: the router's 64-bit rank keys order (score, expert) candidates exactly as the CPU
 * reference's top-k does (src/backend/cpu/ref_moe.c ranks_before: larger score first, +0 == -0,
 * NaN after every number, ties to the lower index), with the empty candidate (index < 0) last.
 * Every pair of a set of special and ordinary values, and the indices back from the keys. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "backend/cuda/route_key.h"
#include "pz_test.h"

/* The order as ref_moe.c states it, written out here independently of the keys. */
static int ranks_before(float a, int ia, float b, int ib) {
  if (ia < 0) return 0;
  if (ib < 0) return 1;
  const int na = isnan(a), nb = isnan(b);
  if (na != nb) return nb;
  if (!na && a != b) return a > b;
  return ia < ib;
}

static float bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

int main(void) {
  const float vals[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 1.0f + 0x1p-23f, INFINITY, -INFINITY, NAN, -NAN,
                        bits(0x7fc00001u), bits(0xffbfffffu), /* NaNs with payloads, quiet and signalling */
                        bits(0x00000001u), bits(0x80000001u), /* the smallest denormals, both signs */
                        0x1p-126f, -0x1p-126f, 3.4028235e38f, -3.4028235e38f, 0.1f, -0.1f, 0.7310586f};
  const int nv = (int)(sizeof vals / sizeof vals[0]);
  const int idx[] = {-1, 0, 1, 2, 383, 1023, 2147483647};
  const int ni = (int)(sizeof idx / sizeof idx[0]);
  int pairs = 0, wrong = 0;
  for (int a = 0; a < nv; a++)
    for (int ia = 0; ia < ni; ia++)
      for (int b = 0; b < nv; b++)
        for (int ib = 0; ib < ni; ib++) {
          const uint64_t ka = pz_route_key(vals[a], idx[ia]), kb = pz_route_key(vals[b], idx[ib]);
          const int want = ranks_before(vals[a], idx[ia], vals[b], idx[ib]);
          if ((ka > kb) != want) {
            if (wrong < 5)
              fprintf(stderr, "(%a, %d) vs (%a, %d): keys %016llx %016llx, ranks_before %d\n", vals[a], idx[ia],
                      vals[b], idx[ib], (unsigned long long)ka, (unsigned long long)kb, want);
            wrong++;
          }
          pairs++;
        }
  CHECK(wrong == 0);
  /* The index comes back from the key; the empty candidate is key 0 and index -1. */
  for (int v = 0; v < nv; v++)
    for (int i = 0; i < ni; i++) {
      const uint64_t k = pz_route_key(vals[v], idx[i]);
      CHECK(pz_route_key_index(k) == idx[i]);
      CHECK((k == 0) == (idx[i] < 0));
    }
  /* Distinct indices give distinct keys even for equal scores (+0 / -0, NaNs with other payloads). */
  CHECK(pz_route_key(0.0f, 5) != pz_route_key(-0.0f, 6) && pz_route_key(0.0f, 5) > pz_route_key(-0.0f, 6));
  CHECK(pz_route_key(NAN, 3) > pz_route_key(bits(0x7fc00001u), 4));
  CHECK(pz_route_key(-INFINITY, 1000) > pz_route_key(NAN, 0)); /* every number before every NaN */
  printf("route keys: %d ordered pairs as ranks_before\n", pairs);
  TEST_DONE();
}
