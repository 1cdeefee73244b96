/* README.md against the sources: every PREZERO_* environment variable that src/, tools/,
 * include/ or tests/ read (a quoted "PREZERO_NAME" literal) has a row in the README's
 * environment table, and the orientation picture it shows is committed and small. */
#define _XOPEN_SOURCE 700 /* nftw */
#include <ctype.h>
#include <ftw.h>
#include <string.h>
#include <sys/stat.h>
#include "pz_test.h"

static char root[512];
static char *env_section; /* the README from "## Environment variables" on */
static int n_vars;

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
