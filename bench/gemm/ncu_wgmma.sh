#!/usr/bin/env bash
# ncu evidence for the wgmma split-K kernel against cuBLAS on the shapes where ours loses
# (Kimi-K2 TP 1 q_b and o_proj, m = 1 / 32 / 128): speed of light, launch shape, memory
# workload and warp stalls of one launch each. Usage, on the GPU machine after a build into
# build-dev (tools/device-check.sh build):  OUT=/dir bash bench/gemm/ncu_wgmma.sh
# PZ_NCU_CASES="gemm:m:cfg ..." overrides the cases (cfg = splits,wt,warps,wn as PREZERO_BENCH_CFG).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/pz_ncu}; mkdir -p "$OUT"
P=build-dev/prezero
S="--section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats"
K="Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|L1/TEX Cache|Compute \(SM\)|Grid Size|Block Size|Registers|Dynamic Shared|Waves Per SM|Achieved Occupancy|Stall|Warp Cycles Per Issued|Issued Warp|No Eligible|Active Warps|Mem Busy|Max Bandwidth|L2 Hit|DRAM Frequency|SM Frequency|Elapsed Cycles"
for c in ${PZ_NCU_CASES:-o_proj:1:4,4,8,3 o_proj:32:4,2,8,3 o_proj:128:2,2,8,3 o_proj:128:2,4,8,3 q_b:128:2,4,8,3 q_b:32:2,2,8,3}; do
  IFS=: read g m cfg <<< "$c"
  for kern in gemm_wgmma nvjet; do
    [ $kern = nvjet ] && [ "${seen:-}" = "$g$m" ] && continue
    echo "== $g m=$m ${kern} cfg=$cfg"
    PREZERO_BENCH_CFG=$cfg timeout 120 ncu --clock-control none -k regex:$kern -s 2 -c 1 $S \
      $P bench gemm --no-tune --reps 1 --m $m --only Kimi-K2/tp1/$g 2>&1 | grep -E "$K" | sed 's/  */ /g'
  done
  seen=$g$m
done
