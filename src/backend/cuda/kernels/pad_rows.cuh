/* The padding rule of a step run in a larger captured batch size (exec.c pad_rows), shared by the
 * kernels that read the executor's real-row word: the MLA and GQA attention (padding rows attend one
 * position) and the MoE router (padding rows route to no expert). */
#pragma once
#include <stdint.h>

/* The real rows of a batch of m rows: *rows when rows is set and 0 < *rows < m, else m (rows NULL, a
 * word of 0 under PREZERO_PAD_ATTN=0, or a full batch). Rows r..m-1 are padding; their outputs are
 * discarded. rows: device i32 [1] or NULL. */
__device__ __forceinline__ int pz_real_rows(const int32_t *rows, int m) {
  const int r = rows ? *rows : 0;
  return r > 0 && r < m ? r : m;
}
