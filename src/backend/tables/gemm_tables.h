/* Built-in GEMM tuner tables: tuned on the device by `prezero bench gemm` / `prezero tune`,
 * compiled into the library, used when the cache holds no table for the device. */
#ifndef PZ_BACKEND_TABLES_GEMM_TABLES_H
#define PZ_BACKEND_TABLES_GEMM_TABLES_H

/* The file key of a device's table: "gemm_<name>_<sm_count>sm", where every character of the
 * name other than [A-Za-z0-9] becomes '_' (at most 200 of them). Writes at most n bytes
 * (always NUL-terminated); returns out. */
char *pz_gemm_table_key(char *out, unsigned long n, const char *device, int sm_count);

/* The built-in table JSON ({device, sm_count, entries: [...]}, the format of tuner.h) for this
 * device name and SM count, or NULL when none is built in. The text is static: never freed. */
const char *pz_gemm_builtin_table(const char *device, int sm_count);

/* Number of built-in tables and the key of table i (for listings); NULL past the end. */
int pz_gemm_builtin_count(void);
const char *pz_gemm_builtin_key(int i);

#endif
