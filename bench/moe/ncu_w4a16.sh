#!/usr/bin/env bash
# ncu evidence for the W4A16 routed-expert kernel (moe_w4a16.cu through moe_q_common.cuh's mm_kernel):
# speed of light, launch shape, occupancy, memory workload, warp stalls and scheduler issue of the
# gate/up and down launches at Kimi-K2.5 TP 1 shapes. Usage, on the GPU machine after a build into
# build-dev (tools/device-check.sh build):  OUT=/dir bash bench/moe/ncu_w4a16.sh
# PZ_NCU_M="1 32" picks the batch sizes; PZ_NCU_KERNEL the kernel regex (default mm_kernel).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/pz_ncu}; mkdir -p "$OUT"
P=build-dev/prezero
S="--section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section InstructionStats"
K="Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|L1/TEX Cache|Compute \(SM\)|Grid Size|Block Size|Registers|Dynamic Shared|Static Shared|Waves Per SM|Achieved Occupancy|Theoretical Occ|Stall|Warp Cycles Per Issued|Issued Warp|No Eligible|Active Warps|Eligible Warps|Mem Busy|Max Bandwidth|L2 Hit|Executed Ipc|Issue Slots|SM Busy|Executed Instructions|SM Frequency|Elapsed Cycles|smsp__pcsamp"
# Warp stall reasons, per issued instruction (the WarpStateStats breakdown as numbers).
STALL="--metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio"
for m in ${PZ_NCU_M:-1 32}; do
  echo "== moe w4a16 TP 1 m=$m kernel=${PZ_NCU_KERNEL:-^mm_kernel$} (first 2 launches: gate/up, down)"
  timeout 180 ncu --clock-control none -k regex:"${PZ_NCU_KERNEL:-^mm_kernel$}" -c 2 $S $STALL \
    $P bench moe --quant int4 --tp 1 --m $m --reps 1 2>&1 | grep -E "$K|stalled|mm_kernel|==PROF==|error|Error" | sed 's/  */ /g'
done
