/* README.md against the sources: every PREZERO_* environment variable that src/, tools/,
 * include/ or tests/ read (a quoted "PREZERO_NAME" literal) has a row in the README's
 * environment table, and every variable a row names is such a literal somewhere; every test the
 * README names in backquotes (`test_NAME`) has its source under tests/ or tests/cuda/; and the
 * orientation picture it shows is committed and small. */
#define _XOPEN_SOURCE 700 /* nftw */
#include <ctype.h>
#include <ftw.h>
#include <string.h>
#include <sys/stat.h>
#include "pz_test.h"

static char root[512];
static char *env_section; /* the README from "## Environment variables" on */
static int n_vars;
static char seen[256][80]; /* the distinct names read */
static int n_seen;

static int has_suffix(const char *p, const char *s) {
  size_t n = strlen(p), k = strlen(s);
  return n >= k && !strcmp(p + n - k, s);
}

static int visit(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
  (void)sb; (void)ftw;
  if (type != FTW_F || strstr(path, "/tests/data/") || has_suffix(path, "/test_readme.c")) return 0; /* its own examples */
  if (!has_suffix(path, ".c") && !has_suffix(path, ".h") && !has_suffix(path, ".cu") && !has_suffix(path, ".sh")) return 0;
  char *t = pz_test_slurp(path, NULL);
  if (!t) return 0;
  for (char *p = strstr(t, "\"PREZERO_"); p; p = strstr(p + 1, "\"PREZERO_")) {
    char name[80];
    size_t n = 0;
    const char *q = p + 1;
    while (n + 1 < sizeof name && (isupper((unsigned char)*q) || isdigit((unsigned char)*q) || *q == '_')) name[n++] = *q++;
    name[n] = 0;
    if (*q != '"' || name[n - 1] == '_') continue; /* only whole quoted names: getenv("PREZERO_X") */
    char row1[100], row2[100];
    snprintf(row1, sizeof row1, "`%s`", name);
    snprintf(row2, sizeof row2, "`%s=", name);
    n_vars++;
    int known = 0;
    for (int k = 0; k < n_seen && !known; k++) known = !strcmp(seen[k], name);
    if (!known && n_seen < 256) snprintf(seen[n_seen++], sizeof seen[0], "%s", name);
    if (!strstr(env_section, row1) && !strstr(env_section, row2)) {
      fprintf(stderr, "FAIL: %s reads %s, which has no row in README.md's environment table\n", path + strlen(root) + 1, name);
      pz_test_failures++;
    }
  }
  free(t);
  return 0;
}

int main(void) {
  PZ_TEST_PATH(root, "..");
  char p[700];
  snprintf(p, sizeof p, "%s/README.md", root);
  char *readme = pz_test_slurp(p, NULL);
  CHECK(readme != NULL);
  if (!readme) TEST_DONE();
  env_section = strstr(readme, "## Environment variables");
  CHECK(env_section != NULL);
  if (!env_section) TEST_DONE();
  static const char *const dirs[] = {"src", "tools", "include", "tests"};
  for (int i = 0; i < 4; i++) {
    snprintf(p, sizeof p, "%s/%s", root, dirs[i]);
    CHECK(nftw(p, visit, 16, FTW_PHYS) == 0);
  }
  CHECK(n_vars >= 30); /* the scan saw the sources (about 40 literals today) */
  /* The other way: every PREZERO_ name in a row's first cell is read somewhere. */
  int n_rows = 0;
  for (const char *row = strstr(env_section, "\n| `PREZERO_"); row; row = strstr(row + 1, "\n| `PREZERO_")) {
    const char *end = strstr(row + 3, " |");
    n_rows++;
    for (const char *q = strstr(row, "`PREZERO_"); q && end && q < end; q = strstr(q + 1, "`PREZERO_")) {
      char name[80];
      size_t n = 0;
      for (const char *c = q + 1; n + 1 < sizeof name && (isupper((unsigned char)*c) || isdigit((unsigned char)*c) || *c == '_'); c++)
        name[n++] = *c;
      name[n] = 0;
      int read = 0;
      for (int k = 0; k < n_seen && !read; k++) read = !strcmp(seen[k], name);
      if (!read) {
        fprintf(stderr, "FAIL: README.md's environment table has a row for %s, which no source reads\n", name);
        pz_test_failures++;
      }
    }
  }
  CHECK(n_rows >= 30);
  /* Every `test_NAME` the README cites is a test source. */
  int n_tests = 0;
  for (const char *q = strstr(readme, "`test_"); q; q = strstr(q + 1, "`test_")) {
    char name[80];
    size_t n = 0;
    const char *c = q + 1;
    while (n + 1 < sizeof name && (islower((unsigned char)*c) || isdigit((unsigned char)*c) || *c == '_')) name[n++] = *c++;
    name[n] = 0;
    if (*c != '`') continue; /* test_fuzz_replay_{config,...}: a pattern, not one name */
    n_tests++;
    static const char *const forms[] = {"tests/%s.c", "tests/cuda/%s.c", "tests/cuda/%s.cu"};
    struct stat tb;
    int found = 0;
    for (int k = 0; k < 3 && !found; k++) {
      char rel[128];
      snprintf(rel, sizeof rel, forms[k], name);
      snprintf(p, sizeof p, "%s/%s", root, rel);
      found = stat(p, &tb) == 0;
    }
    if (!found) {
      fprintf(stderr, "FAIL: README.md names %s, which is not a test under tests/ or tests/cuda/\n", name);
      pz_test_failures++;
    }
  }
  CHECK(n_tests >= 30);
  /* The orientation picture: referenced, committed, under 300 KB, a PNG. */
  CHECK(strstr(readme, "](docs/moe_layer.png)") != NULL);
  snprintf(p, sizeof p, "%s/docs/moe_layer.png", root);
  struct stat sb;
  CHECK(stat(p, &sb) == 0 && sb.st_size > 1000 && sb.st_size < 300 * 1024);
  FILE *f = fopen(p, "rb");
  unsigned char sig[8] = {0};
  if (f) { CHECK(fread(sig, 1, 8, f) == 8); fclose(f); }
  CHECK(!memcmp(sig, "\x89PNG\r\n\x1a\n", 8));
  free(readme);
  TEST_DONE();
}
