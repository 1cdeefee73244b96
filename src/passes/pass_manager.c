/* Pass manager: verify() the input, then run the ordered pass list, each switchable off by name
 * (opts->disable), each followed by verify(), with optional before/after text + DOT dumps
 * (opts->dump_dir) and one statistics line per pass to opts->log. Reads no environment. */
#include "passes/passes.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/options.h"
#include "passes/prezero.h"

typedef struct pz_pass_def {
  const char *name;
  /* Non-zero when the pass runs for these options (before PREZERO_DISABLE_PASSES). */
  int (*wanted)(const pz_pass_opts *o);
  const char *why_off;    /* shown when wanted() says no */
  pz_status (*run)(pz_graph *g, const pz_pass_opts *o, FILE *log, pz_pass_stats *st);
} pz_pass_def;

static pz_status run_prezero(pz_graph *g, const pz_pass_opts *o, FILE *log, pz_pass_stats *st) {
  pz_prezero_batch b = {.m = 0, .fires = NULL, .attn_slots = o->attn_slots == 0 ? 0 : 1};
  return pz_pass_prezero_batch(g, &b, log, st, NULL);
}

static const pz_pass_def pass_list[] = {
    {"prezero", pz_prezero_flag, "prezero flag off (PREZERO_ENABLE=1 or --prezero on)", run_prezero},
};
#define N_PASSES ((int)(sizeof pass_list / sizeof pass_list[0]))
_Static_assert(sizeof pass_list / sizeof pass_list[0] <= PZ_MAX_PASSES, "raise PZ_MAX_PASSES");

int pz_prezero_flag(const pz_pass_opts *o) { return o && o->prezero == 1; }

void pz_pass_opts_apply(pz_pass_opts *po, const pz_runtime_opts *ro) {
  if (!po || !ro) return;
  if (po->prezero < 0) po->prezero = ro->prezero == 1;
  if (!po->dump_dir) po->dump_dir = ro->dump_graph;
  if (!po->disable) po->disable = ro->disable_passes;
  if (po->attn_slots < 0) po->attn_slots = ro->attn_slots;
}

/* The next name of the comma-separated list at *p, blanks around it trimmed: *len bytes at the returned
 * pointer (possibly 0 for an empty item); *p moves past its comma. NULL when the list is used up. */
static const char *next_name(const char **p, size_t *len) {
  const char *s = *p;
  if (!s || !*s) return NULL;
  const char *q = strchr(s, ',');
  size_t n = q ? (size_t)(q - s) : strlen(s);
  *p = q ? q + 1 : s + n;
  while (n && *s == ' ') { s++; n--; }
  while (n && s[n - 1] == ' ') n--;
  *len = n;
  return s;
}

static bool name_is(const char *s, size_t n, const char *name) { return strlen(name) == n && !strncmp(s, name, n); }

int pz_pass_disabled_in(const char *e, const char *name) {
  if (!e || !name) return 0;
  size_t n;
  for (const char *s; (s = next_name(&e, &n));)
    if (name_is(s, n, name) || name_is(s, n, "all")) return 1;
  return 0;
}

/* Every name in the comma-separated list e must be a pass of pass_list or "all". */
static pz_status check_disable_list(const char *e) {
  size_t n;
  for (const char *s; (s = next_name(&e, &n));) {
    bool known = n == 0 || name_is(s, n, "all");
    for (int i = 0; i < N_PASSES && !known; i++) known = name_is(s, n, pass_list[i].name);
    if (!known) {
      char names[256] = "";
      for (int i = 0; i < N_PASSES; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", pass_list[i].name);
      return pz_error(PZ_ERR_INVALID_ARG, "PREZERO_DISABLE_PASSES: no pass is called '%.*s'; name passes from: %s, or all",
                      (int)n, s, names);
    }
  }
  return PZ_OK;
}

pz_status pz_pass_check_disable(const char *list) { return check_disable_list(list); }

static pz_status dump_one(const pz_graph *g, const char *dir, int idx, const char *pass,
                          const char *when) {
  char path[4096];
  const char *ext[2] = {"txt", "dot"};
  for (int k = 0; k < 2; k++) {
    snprintf(path, sizeof path, "%s/%02d-%s.%s.%s", dir, idx, pass, when, ext[k]);
    FILE *f = fopen(path, "w");
    if (!f) return pz_error(PZ_ERR_IO, "graph dump: cannot write %s: %s; point PREZERO_DUMP_GRAPH (the dump folder) at a writable directory", path, strerror(errno));
    pz_status st = k == 0 ? pz_graph_dump_text(g, f) : pz_graph_dump_dot(g, f);
    if (fclose(f) != 0 && st == PZ_OK) st = pz_error(PZ_ERR_IO, "graph dump: cannot close %s", path);
    PZ_CHECK(st);
  }
  return PZ_OK;
}

/* verify() with the pass named in the message. */
static pz_status verify_after(const pz_graph *g, const char *when) {
  pz_status st = pz_graph_verify(g);
  if (st != PZ_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", pz_last_error());
    return pz_error(st, "%s: %s", when, msg);
  }
  return PZ_OK;
}

pz_status pz_run_passes(pz_graph *g, const pz_pass_opts *o, pz_pass_stats *stats, int *n_stats) {
  if (n_stats) *n_stats = 0;
  if (!g) return pz_error(PZ_ERR_INVALID_ARG, "pz_run_passes: no graph");
  pz_pass_opts def = PZ_PASS_OPTS_INIT;
  if (!o) o = &def;
  const char *dir = o->dump_dir;
  if (dir && !dir[0]) dir = NULL;
  PZ_CHECK(check_disable_list(o->disable));
  PZ_CHECK(verify_after(g, "before the passes"));
  if (dir && mkdir(dir, 0777) != 0 && errno != EEXIST)
    return pz_error(PZ_ERR_IO, "graph dump: cannot create %s: %s; point PREZERO_DUMP_GRAPH (the dump folder) at a writable directory", dir, strerror(errno));
  for (int i = 0; i < N_PASSES; i++) {
    const pz_pass_def *p = &pass_list[i];
    pz_pass_stats st;
    memset(&st, 0, sizeof st);
    snprintf(st.name, sizeof st.name, "%s", p->name);
    const char *off = NULL;
    if (pz_pass_disabled_in(o->disable, p->name)) off = "disabled by PREZERO_DISABLE_PASSES";
    else if (p->wanted && !p->wanted(o)) off = p->why_off;
    if (off) {
      if (o->log) fprintf(o->log, "pass %-10s off: %s\n", p->name, off);
    } else {
      st.ran = true;
      if (dir) PZ_CHECK(dump_one(g, dir, i + 1, p->name, "before"));
      PZ_CHECK(p->run(g, o, o->log, &st));
      char when[64];
      snprintf(when, sizeof when, "after pass %s", p->name);
      PZ_CHECK(verify_after(g, when));
      if (dir) PZ_CHECK(dump_one(g, dir, i + 1, p->name, "after"));
      if (o->log) fprintf(o->log, "pass %-10s matched=%d rewritten=%d\n", p->name, st.matched, st.rewritten);
    }
    if (stats) stats[i] = st;
    if (n_stats) *n_stats = i + 1;
  }
  return PZ_OK;
}
