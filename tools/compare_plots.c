/* `prezero compare`'s plots: gnuplot data and script, PNGs from gnuplot or matplotlib (compare_out.h). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "compare_out.h"

/* The matplotlib renderer: $PREZERO_PLOT_SCRIPT, else tools/plot_compare.py of the source tree. */
const char *pz_cmpout_plot_script(void) {
  const char *e = getenv("PREZERO_PLOT_SCRIPT");
#ifdef PZ_PLOT_SCRIPT
  return e && *e ? e : PZ_PLOT_SCRIPT;
#else
  return e && *e ? e : "tools/plot_compare.py";
#endif
}

/* gnuplot data and script; the PNGs are rendered by gnuplot when it is on PATH, else by
 * python3 + matplotlib (pz_cmpout_plot_script(), from the compare.json at json_src). */
int pz_cmpout_write_plots(const char *dir, const pz_cmp_result *r, const char *json_src, bool *rendered) {
  char p[1200];
  *rendered = false;
  snprintf(p, sizeof p, "%s/throughput.dat", dir);
  FILE *f = fopen(p, "w");
  if (!f) return 1;
  fprintf(f, "# conc  tok/s/GPU ON  tok/s/GPU OFF  TPOT ON ms  TPOT OFF ms\n");
  for (int i = 0; i < r->n_points; i++)
    fprintf(f, "%d %.3f %.3f %.4f %.4f\n", r->points[i].conc, r->points[i].tput_on, r->points[i].tput_off,
            r->points[i].tpot_on_ms, r->points[i].tpot_off_ms);
  fclose(f);
  snprintf(p, sizeof p, "%s/components.dat", dir);
  f = fopen(p, "w");
  if (!f) return 1;
  fprintf(f, "# conc  Δ µs/layer (ON - OFF): qkv_a q_b gate o_proj sh_gu gemm_subtotal donor_fill; n/f or unmeasured = 0\n");
  for (int i = 0; i < r->n_points; i++) {
    const pz_cmp_point *pt = &r->points[i];
    fprintf(f, "%d", pt->conc);
    for (int c = 0; c < PZ_CMP_N_COMP; c++) {
      double d = pz_cmpout_comp_delta(pt, c);
      bool nf = c <= PZ_CMP_LAST_CONSUMER && pt->fired[c] == PZ_CMP_NOT_FIRED;
      fprintf(f, " %.4f", (d == d && !nf && pt->profiled) ? d : 0.0);
    }
    fprintf(f, "\n");
  }
  fclose(f);
  snprintf(p, sizeof p, "%s/plots.gp", dir);
  f = fopen(p, "w");
  if (!f) return 1;
  fprintf(f,
          "# prezero compare plots: run 'gnuplot plots.gp' in this folder.\n"
          "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo size 900,560 } else { set terminal png size 900,560 }\n"
          "set termoption noenhanced\n"
          "set output 'throughput.png'\n"
          "set title '%s TP %d, %d layers: output tokens/s per GPU'\n"
          "set xlabel 'concurrency'; set ylabel 'tokens/s per GPU'; set logscale x 2; set key left top; set grid\n"
          "plot 'throughput.dat' using 1:2 with linespoints lw 2 title 'prezero ON', "
          "'' using 1:3 with linespoints lw 2 title 'prezero OFF'\n"
          "unset logscale x\n"
          "set output 'components.png'\n"
          "set title 'kernel time per layer, ON - OFF (µs; negative = saved; n/f = 0)'\n"
          "set xlabel 'concurrency'; set ylabel 'µs per layer'; set style data histogram\n"
          "set style histogram clustered gap 1; set style fill solid 0.8 border -1; set key outside right\n"
          "plot 'components.dat' using 2:xtic(1) title 'qkv_a', '' using 3 title 'q_b', '' using 4 title 'gate', "
          "'' using 5 title 'o_proj', '' using 6 title 'sh_gu', '' using 7 title 'GEMM subtotal', '' using 8 title "
          "'donor fill cost'\n",
          r->model, r->tp, r->layers);
  fclose(f);
  char cmd[3000];
  if (system("command -v gnuplot >/dev/null 2>&1") == 0) {
    snprintf(cmd, sizeof cmd, "cd '%s' && gnuplot plots.gp 2>/dev/null", dir);
    *rendered = system(cmd) == 0;
  }
  if (!*rendered && json_src && json_src[0] && access(pz_cmpout_plot_script(), R_OK) == 0 &&
      system("command -v python3 >/dev/null 2>&1") == 0) {
    snprintf(cmd, sizeof cmd, "python3 '%s' '%s' '%s' >/dev/null 2>&1", pz_cmpout_plot_script(), json_src, dir);
    *rendered = system(cmd) == 0;
  }
  return 0;
}
