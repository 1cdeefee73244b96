/* prezero compare: placeholder until its issue lands. */
#include <stdio.h>
#include "cli.h"
int pz_cmd_compare(int argc, char **argv) {
  fprintf(stderr, "prezero: 'compare' is not available in this build yet\n");
  return 1;
}
