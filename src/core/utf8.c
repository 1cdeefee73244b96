/* UTF-8 validation (utf8.h). */
#include "core/utf8.h"

/* Length of the well-formed UTF-8 sequence at s, or 0. s is NUL-terminated. */
static int utf8_seq(const unsigned char *s) {
  if (s[0] < 0x80) return 1;
  int n = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3 : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
  unsigned lo = s[0] == 0xe0 ? 0xa0 : s[0] == 0xf0 ? 0x90 : 0x80, hi = s[0] == 0xed ? 0x9f : s[0] == 0xf4 ? 0x8f : 0xbf;
  for (int i = 1; i < n; i++)
    if (s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xbf)) return 0;
  return n;
}

long pz_utf8_bad_at(const char *s) {
  const unsigned char *u = (const unsigned char *)s;
  for (long i = 0; u[i];) {
    int n = utf8_seq(u + i);
    if (!n) return i;
    i += n;
  }
  return -1;
}

void pz_utf8_scrub(char *s) {
  unsigned char *u = (unsigned char *)s;
  for (long i = 0; u[i];) {
    int n = utf8_seq(u + i);
    if (!n) u[i++] = '?';
    else i += n;
  }
}
