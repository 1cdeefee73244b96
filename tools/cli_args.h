/* Argument parsing and messages shared by the prezero CLI subcommands (header-only, so white-box
 * tests that include a subcommand's .c file need nothing else): the --seed value, the refusal
 * for too few GPUs. */
#ifndef PZ_TOOLS_CLI_ARGS_H
#define PZ_TOOLS_CLI_ARGS_H
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

/* Parses a --seed value: decimal digits ("010" is ten, "08" is eight), or hex after 0x / 0X
 * ("0x10" is sixteen), 0 .. 2^64 - 1, as `prezero run` has always read it (never octal: base 0
 * read "010" as 8 and refused "08"). Returns 0 and sets *out; returns -1 and leaves *out alone
 * for "", a sign or space, "0x" with no digits, any other character, or a value above 2^64 - 1. */
static inline int pz_cli_parse_seed(const char *v, unsigned long long *out) {
  int hex = v[0] == '0' && (v[1] == 'x' || v[1] == 'X');
  const char *digits = hex ? v + 2 : v;
  if (!(hex ? isxdigit((unsigned char)digits[0]) : isdigit((unsigned char)digits[0]))) return -1;
  char *end;
  errno = 0;
  unsigned long long x = strtoull(digits, &end, hex ? 16 : 10);
  if (*end || errno) return -1;
  *out = x;
  return 0;
}

/* Writes into buf (cap bytes) the refusal of a command that needs `need` GPUs (need >= 1) when
 * `have` are visible, as "<what> needs N GPU(s), H visible; <how to fix>": the fix is "run it on
 * a machine with a CUDA GPU" (need 1) or "... with at least N GPUs", plus " or use --tp 1" when
 * tp_flag is nonzero and a GPU is visible. E.g. "--tp 2 needs 2 GPUs, 1 visible; run it on a
 * machine with at least 2 GPUs or use --tp 1". */
static inline void pz_cli_gpu_refusal(char *buf, size_t cap, const char *what, int need, int have, int tp_flag) {
  if (need <= 1)
    snprintf(buf, cap, "%s needs 1 GPU, %d visible; run it on a machine with a CUDA GPU", what, have);
  else
    snprintf(buf, cap, "%s needs %d GPUs, %d visible; run it on a machine with at least %d GPUs%s", what, need, have,
             need, tp_flag && have >= 1 ? " or use --tp 1" : "");
}
#endif
