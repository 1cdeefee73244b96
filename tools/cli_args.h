/* Argument parsing shared by the prezero CLI subcommands (header-only, so white-box tests that
 * include a subcommand's .c file need nothing else): the --seed value. */
#ifndef PZ_TOOLS_CLI_ARGS_H
#define PZ_TOOLS_CLI_ARGS_H
#include <ctype.h>
#include <errno.h>
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
#endif
