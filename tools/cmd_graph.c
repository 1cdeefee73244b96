/* prezero graph: placeholder until its issue lands. */
#include <stdio.h>
#include "cli.h"
int pz_cmd_graph(int argc, char **argv) {
  fprintf(stderr, "prezero: 'graph' is not available in this build yet\n");
  return 1;
}
