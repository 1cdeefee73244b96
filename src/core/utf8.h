/* UTF-8 validation (RFC 3629: no overlong forms, no surrogates, at most U+10FFFF), for the
 * strings of the files prezero reads (config.json, safetensors tensor names), which Python's json
 * and the safetensors library require to be valid UTF-8. */
#ifndef PZ_CORE_UTF8_H
#define PZ_CORE_UTF8_H

/* Byte offset of the first invalid UTF-8 sequence in the NUL-terminated s, or -1 when it is all valid. */
long pz_utf8_bad_at(const char *s);

/* Replaces every byte of s that is not part of a well-formed UTF-8 sequence with '?', in place: a
 * message that quotes a file's bytes, or is cut at a length limit inside a multi-byte character,
 * stays valid UTF-8. */
void pz_utf8_scrub(char *s);

#endif
