/* Argument parsing and messages shared by the prezero CLI subcommands (header-only, so white-box
 * tests that include a subcommand's .c file need nothing else): the --seed value, the refusal
 * for too few GPUs, the out-of-range message, a --config that is a directory.
 *
 * Exit codes, the same in every subcommand: 2 when the command line itself is wrong (an unknown
 * flag, a missing or malformed value, a value out of range, including ranges that depend on the
 * model such as a --tp that does not divide the heads or a --context beyond
 * max_position_embeddings, two flags that exclude each other); 1 for everything else (a file or
 * checkpoint that cannot be read or is malformed, memory, devices, output that cannot be
 * written). */
#ifndef PZ_TOOLS_CLI_ARGS_H
#define PZ_TOOLS_CLI_ARGS_H
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Whether s starts a number as the CLI writes one: a digit, or '-' or '.' then a digit ("-1",
 * ".5"), so that an empty list element ("1,,2", "1,") and a leading '+' or space, which strtol /
 * strtod skip or accept, are refused like any other junk. */
static inline int pz_cli_starts_number(const char *s) {
  if (*s == '-') s++;
  if (*s == '.') s++;
  return isdigit((unsigned char)*s);
}

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

#define PZ_CLI_EXIT_USAGE 2 /* the command line is wrong */
#define PZ_CLI_EXIT_ERROR 1 /* anything else */

/* Prints "prezero <cmd>: <flag> <x> is out of range; use <flag> <lo>..<hi><why>" (why: "" or
 * e.g. " (max_position_embeddings of tiny)") and returns PZ_CLI_EXIT_USAGE. */
static inline int pz_cli_out_of_range(const char *cmd, const char *flag, long long x, long long lo, long long hi,
                                      const char *why) {
  fprintf(stderr, "prezero %s: %s %lld is out of range; use %s %lld..%lld%s\n", cmd, flag, x, flag, lo, hi,
          why ? why : "");
  return PZ_CLI_EXIT_USAGE;
}

/* Parses v as a decimal integer for `flag` into *out, within lo..hi. Returns 0; or prints one line
 * and returns PZ_CLI_EXIT_USAGE: "prezero <cmd>: <flag> needs an integer, got '<v>'; see 'prezero
 * <cmd> --help'" for anything that is not one (NULL or empty too), and pz_cli_out_of_range's line
 * for a number outside lo..hi; a number beyond 64 bits gets a line of its own naming --help. */
static inline int pz_cli_parse_int(const char *cmd, const char *flag, const char *v, long long lo, long long hi,
                                   long long *out) {
  char *end = NULL;
  errno = 0;
  const long long x = v ? strtoll(v, &end, 10) : 0;
  if (!v || !pz_cli_starts_number(v) || *end) { /* "", "+2", " 2" included */
    fprintf(stderr, "prezero %s: %s needs an integer, got '%s'; see 'prezero %s --help'\n", cmd, flag, v ? v : "", cmd);
    return PZ_CLI_EXIT_USAGE;
  }
  if (errno == ERANGE) {
    fprintf(stderr, "prezero %s: %s %s is beyond a 64-bit integer; see 'prezero %s --help' for the range of %s\n", cmd,
            flag, v, cmd, flag);
    return PZ_CLI_EXIT_USAGE;
  }
  if (x < lo || x > hi) return pz_cli_out_of_range(cmd, flag, x, lo, hi, NULL);
  *out = x;
  return 0;
}

/* An empty --config or --model value ("--config ''", "--config="): prints one line naming what to
 * give (presets: the preset list, for --config) and returns PZ_CLI_EXIT_USAGE; returns 0 when v is
 * not empty. Without it plan, compare, soak and bench step ran the embedded tiny model. */
static inline int pz_cli_empty_model_flag(const char *cmd, const char *flag, const char *v, const char *presets) {
  if (!v || v[0]) return 0;
  if (!strcmp(flag, "--model"))
    fprintf(stderr, "prezero %s: --model is empty; give it the path of a Hugging Face checkpoint directory\n", cmd);
  else
    fprintf(stderr, "prezero %s: %s is empty; use a preset (%s) or a config.json path\n", cmd, flag,
            presets ? presets : "see --help");
  return PZ_CLI_EXIT_USAGE;
}

/* A --config value that is a directory: prints one line saying so and what to pass instead
 * (--model DIR when the command has --model and DIR holds a config.json, else DIR/config.json)
 * and returns PZ_CLI_EXIT_ERROR; returns 0 when `path` is not a directory. */
static inline int pz_cli_config_dir(const char *cmd, const char *path, int has_model_flag) {
  struct stat sb;
  if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) return 0;
  char cj[4096];
  snprintf(cj, sizeof cj, "%s/config.json", path);
  int has_cfg = stat(cj, &sb) == 0 && S_ISREG(sb.st_mode);
  if (has_cfg && has_model_flag)
    fprintf(stderr, "prezero %s: --config %s is a directory, not a config.json file; for a checkpoint directory use "
            "--model %s (or --config %s for its config alone)\n", cmd, path, path, cj);
  else if (has_cfg)
    fprintf(stderr, "prezero %s: --config %s is a directory, not a config.json file; use --config %s\n", cmd, path, cj);
  else
    fprintf(stderr, "prezero %s: --config %s is a directory with no config.json; give --config a preset name or the "
            "path of a config.json file\n", cmd, path);
  return PZ_CLI_EXIT_ERROR;
}
#endif
