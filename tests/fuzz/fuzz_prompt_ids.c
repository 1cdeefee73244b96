/* libFuzzer target: the CLI's --prompt-ids parser (white-box, tools/cmd_run.c). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../../tools/cmd_run.c"
#include "../../tools/cli_ranks.c" /* cmd_run.c's rank launcher */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  memcpy(s, data, size);
  s[size] = 0;
  prompts p;
  memset(&p, 0, sizeof p);
  if (parse_prompts(s, &p) == 0) free_prompts(&p);
  free(s);
  return 0;
}
