/* The --out folder of `prezero compare` (compare.json, compare.md, the plot files) and --render of a
 * saved compare.json into it (compare_out.h). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>
#include "cli_args.h"
#include "compare_out.h"

/* Writes compare.json (unless from a render), compare.md and the plots into dir; prints the
 * markdown on stdout. */
int pz_cmpout_write_outputs(const char *dir, const pz_cmp_result *r, bool json, const char *json_src) {
  char p[1200];
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "prezero compare: cannot create --out folder '%s': %s; give a writable folder\n", dir, strerror(errno));
    return 1;
  }
  if (json) {
    cJSON *j = pz_cmpout_to_json(r);
    char *text = j ? cJSON_Print(j) : NULL;
    snprintf(p, sizeof p, "%s/compare.json", dir);
    FILE *f = text ? fopen(p, "w") : NULL;
    bool ok = f && fputs(text, f) >= 0;
    if (f && fclose(f) != 0) ok = false; /* closed on every path, a failed write included */
    if (!ok) {
      fprintf(stderr, "prezero compare: cannot write '%s'; give a writable --out folder\n", p);
      free(text);
      cJSON_Delete(j);
      return 1;
    }
    free(text);
    cJSON_Delete(j);
  }
  snprintf(p, sizeof p, "%s/compare.md", dir);
  FILE *f = fopen(p, "w");
  if (!f) {
    fprintf(stderr, "prezero compare: cannot write '%s'; give a writable --out folder\n", p);
    return 1;
  }
  pz_cmpout_write_markdown(f, r);
  const bool md_ok = !ferror(f);
  if (fclose(f) != 0 || !md_ok) {
    fprintf(stderr, "prezero compare: cannot write '%s' (disk full?); give a writable --out folder\n", p);
    return 1;
  }
  pz_cmpout_write_markdown(stdout, r);
  bool rendered = false;
  char src[1200];
  if (json) snprintf(src, sizeof src, "%s/compare.json", dir);
  else snprintf(src, sizeof src, "%s", json_src);
  if (pz_cmpout_write_plots(dir, r, src, &rendered) != 0) {
    fprintf(stderr, "prezero compare: cannot write the plot files in '%s'; give a writable --out folder\n", dir);
    return 1;
  }
  const char *js = json ? "compare.json," : "";
  if (rendered) fprintf(stderr, "prezero compare: wrote %s/{%scompare.md,throughput.png,components.png}\n", dir, js);
  else fprintf(stderr, "prezero compare: wrote %s/{%scompare.md,*.dat,plots.gp}; neither gnuplot nor python3 with "
               "matplotlib rendered the PNGs: install gnuplot, or matplotlib and 'python3 %s %s %s'\n", dir, js,
               pz_cmpout_plot_script(), src, dir);
  return 0;
}

int pz_cmpout_render(const char *json_path, const char *dir) {
  struct stat sb; /* a directory opens, then reads as "out of memory": say what it is */
  if (stat(json_path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    char cj[4096];
    snprintf(cj, sizeof cj, "%s/compare.json", json_path);
    int has = stat(cj, &sb) == 0 && S_ISREG(sb.st_mode);
    fprintf(stderr, "prezero compare: --render %s is a directory; give the path of a compare.json%s%s\n", json_path,
            has ? ", e.g. --render " : "", has ? cj : "");
    return PZ_CLI_EXIT_ERROR;
  }
  if (stat(json_path, &sb) == 0 && !S_ISREG(sb.st_mode)) { /* a FIFO would block the open below */
    fprintf(stderr, "prezero compare: --render %s is not a regular file; give the path of a compare.json\n", json_path);
    return PZ_CLI_EXIT_ERROR;
  }
  FILE *f = fopen(json_path, "rb");
  if (!f) {
    fprintf(stderr, "prezero compare: cannot read '%s': %s; give the path of a compare.json\n", json_path, strerror(errno));
    return PZ_CLI_EXIT_ERROR;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = malloc((size_t)(n > 0 ? n : 0) + 1);
  size_t got = text ? fread(text, 1, (size_t)(n > 0 ? n : 0), f) : 0;
  fclose(f);
  if (!text) {
    fprintf(stderr, "prezero compare: out of memory reading the JSON; free some memory\n");
    return PZ_CLI_EXIT_ERROR;
  }
  text[got] = 0;
  pz_cmp_result *r = malloc(sizeof *r);
  const char *why = r ? pz_cmpout_from_json(text, r) : "could not be read (out of memory)";
  free(text);
  if (why) {
    fprintf(stderr, "prezero compare: '%s' %s; give a compare.json written by 'prezero compare'\n", json_path, why);
    free(r);
    return 1;
  }
  int rc = pz_cmpout_write_outputs(dir, r, false, json_path);
  free(r);
  return rc;
}
