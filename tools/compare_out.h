/* The outputs of `prezero compare` (tools/cmd_compare.c), from a pz_cmp_result (compare/compare.h):
 *   compare_report.c  the markdown report (compare.md, and the same text on stdout)
 *   compare_plots.c   the gnuplot data and script, and the PNGs rendered from them
 *   compare_json.c    compare.json: writing it and reading a saved one back
 *   compare_out.c     the --out folder that holds all of them, and --render of a saved compare.json
 * Units, as in the JSON's "units" field: throughput in output tokens/s per GPU, TPOT in ms, E2E in s
 * per request (the osl decode steps, no prefill), kernel components in µs per layer (CUPTI, rank 0). */
#ifndef PZ_TOOLS_COMPARE_OUT_H
#define PZ_TOOLS_COMPARE_OUT_H
#include <stdbool.h>
#include <stdio.h>
#include "compare/compare.h"

/* ON - OFF of component c (a pz_cmp_comp, or PZ_CMP_GEMM: the sum over the consumer GEMMs that have
 * both sides measured) in µs per layer; NAN when not measured. Ignores whether it fired. */
double pz_cmpout_comp_delta(const pz_cmp_point *p, int c);

/* prezero's saving per layer at point p: *saving = OFF - ON of the consumer GEMMs + 2 donors in µs,
 * averaged over the layers run (a dense layer without the MoE op's sh_gu); *share_run = that saving
 * over the layers run as a fraction (not %) of p's TPOT OFF; *share_all = the same for all the
 * model's layers over the projected TPOT OFF. Each is NAN where not measured (not profiled, no
 * TPOT OFF, or a result without the dense / MoE layer split for *share_all). */
void pz_cmpout_step_share(const pz_cmp_result *r, const pz_cmp_point *p, double *saving, double *share_run,
                          double *share_all);

/* Writes the markdown report of r to f: header, throughput / TPOT / E2E table with Δ% and OFF's
 * spread, per-layer kernel Δ and ON / OFF (µs), the --baseline tables when r has baselines, the
 * whole-model projection when not every layer ran, the layer / step-share summary, the consumers
 * that fired, bit-identity, the verdict and targets, notes and the command. Write errors on f are
 * not reported. */
void pz_cmpout_write_markdown(FILE *f, const pz_cmp_result *r);

/* The matplotlib renderer: $PREZERO_PLOT_SCRIPT when set and non-empty, else tools/plot_compare.py
 * of the source tree (PZ_PLOT_SCRIPT). Not checked for existence. */
const char *pz_cmpout_plot_script(void);

/* Writes throughput.dat (conc, tokens/s per GPU ON / OFF, TPOT ON / OFF ms), components.dat (conc and
 * each component's ON - OFF in µs per layer; not fired, not measured or not profiled = 0) and
 * plots.gp into the existing folder dir, then renders throughput.png and components.png with gnuplot
 * when it is on PATH; without gnuplot, or when it fails, with python3 and pz_cmpout_plot_script()
 * from the compare.json at json_src (not tried when json_src is NULL or empty). *rendered: whether the PNGs were rendered.
 * Returns 0, or 1 when a .dat or .gp file cannot be opened (prints nothing; a failed rendering is
 * not an error). */
int pz_cmpout_write_plots(const char *dir, const pz_cmp_result *r, const char *json_src, bool *rendered);

struct cJSON;
/* compare.json of r as a cJSON tree (free it with cJSON_Delete; NULL when its root cannot be
 * allocated). Numbers
 * carry 17 significant digits, so pz_cmpout_from_json reads back the same doubles and the report of
 * the read-back result is byte for byte the same; NAN and infinities become null. Also holds derived
 * per-point fields (saving_per_layer_us, share_of_step_*: pz_cmpout_step_share) not read back. */
struct cJSON *pz_cmpout_to_json(const pz_cmp_result *r);

/* Parses the text of a compare.json into *r (zeroed first; missing fields take their defaults, at
 * most PZ_CMP_MAX_CONC points and PZ_CMP_MAX_ROUNDS rounds are read). Returns NULL on success, else a
 * static one-line reason to follow the file's name ("is not a JSON object", ...); prints nothing. */
const char *pz_cmpout_from_json(const char *text, pz_cmp_result *r);

/* Writes into dir (created if missing, its parent must exist): compare.json when json is true,
 * compare.md, and the plot files (pz_cmpout_write_plots: PNGs from dir/compare.json, else from
 * json_src). Prints the markdown on stdout and one line on stderr naming what was written (or how to
 * render the PNGs). Returns 0, or 1 after one line "prezero compare: ...; ..." on stderr when dir
 * cannot be created or a file cannot be written. */
int pz_cmpout_write_outputs(const char *dir, const pz_cmp_result *r, bool json, const char *json_src);

/* --render: reads the compare.json at json_path and writes its report and plots into dir as
 * pz_cmpout_write_outputs(dir, r, false, json_path) does (no compare.json). Returns 0, or 1
 * (PZ_CLI_EXIT_ERROR) after one line on stderr when json_path is a directory, not a regular file,
 * unreadable or not a compare.json, or when the outputs cannot be written. */
int pz_cmpout_render(const char *json_path, const char *dir);

#endif
