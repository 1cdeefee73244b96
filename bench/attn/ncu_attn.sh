#!/usr/bin/env bash
# ncu evidence for the MLA decode attention at small batches (issue 18): duration, DRAM and L2 traffic,
# warp stalls of the split attention kernel (v4 mla_attn4_kernel, the default above 16 heads; v3 with
# PREZERO_MLA_ATTN=3) and of the combine kernel that
# reduces its split partials, on one `prezero bench attn` row (Kimi-K2 per-rank shapes, paged KV).
# Usage, on the GPU machine after a build into build-dev (tools/device-check.sh build):
#   OUT=/dir bash bench/attn/ncu_attn.sh      PZ_NCU_M="4 16" batch sizes (default 4), PZ_NCU_TP (default 1)
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/pz_ncu_attn}; mkdir -p "$OUT"
P=build-dev/prezero
S="--section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis --section WarpStateStats"
K="Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Compute \(SM\)|Grid Size|Block Size|Registers|Shared Memory|Achieved Occupancy|Issued Warp|No Eligible|Eligible Warps|L2 Hit|Elapsed Cycles|stalled"
STALL="--metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum"
for m in ${PZ_NCU_M:-4}; do
  echo "== mla attention TP ${PZ_NCU_TP:-1} m=$m (the first 4 launches of the split attention and combine kernels)"
  timeout 180 ncu --clock-control none -k regex:"mla_(attn4|attn3|attn2|combine|combine_warp)_kernel" -c 4 $S $STALL \
    $P bench attn --paged --tp ${PZ_NCU_TP:-1} --m $m --reps 3 2>&1 | grep -E "$K|_kernel|==PROF==|error|Error" | sed 's/  */ /g'
done
