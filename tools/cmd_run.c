/* prezero run: placeholder until its issue lands. */
#include <stdio.h>
#include "cli.h"
int pz_cmd_run(int argc, char **argv) {
  fprintf(stderr, "prezero: 'run' is not available in this build yet\n");
  return 1;
}
