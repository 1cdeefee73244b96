#!/usr/bin/env bash
# L2 and DRAM traffic by kind, one launch per case (ncu metrics, clocks not locked): the bytes the SMs read
# from L2 and how many of them hit, the bytes they write, the DRAM bytes, and the L2 / DRAM percentages, for
# the plain streaming read (the yardstick) and the decode kernels whose L2 percentage runs well above their
# DRAM percentage (bench/gemm/NOTES.md, bench/attn/NOTES.md, bench/moe/NOTES.md).
# Usage, on the GPU machine after a build into build-dev with dev_stream_read (tools/device-check.sh ncu_l2):
#   bash bench/ncu_l2.sh
# PZ_NCU_L2_CASES="name;kernel regex;launches to skip;env;command|..." overrides the cases.
set -u
cd "$(dirname "$0")/.."
B=build-dev
# two metric sets, each its own ncu run, so that a name this ncu lacks costs one set, not both
M1="dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_read_lookup_hit.sum"
M1="$M1,lts__t_sectors_op_write.sum,lts__t_sectors.sum,gpu__time_duration.sum"
M1="$M1,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed"
M2="lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum,lts__t_sectors_srcunit_ltcfabric.sum"
M2="$M2,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum"
DEF="read;stream_read;2;;$B/dev_stream_read 1 2048"
DEF="$DEF|attn4_tp1_m128;mla_attn4_kernel;1;;$B/prezero bench attn --paged --tp 1 --m 128 --reps 2"
DEF="$DEF|moe_gateup_m64;^mm_kernel$;0;;$B/prezero bench moe --quant int4 --tp 1 --m 64 --reps 1"
DEF="$DEF|moe_down_m64;^mm_kernel$;1;;$B/prezero bench moe --quant int4 --tp 1 --m 64 --reps 1"
DEF="$DEF|oproj_m64_s2w1;gemm_wgmma;2;PREZERO_BENCH_CFG=2,1,5,3;$B/prezero bench gemm --no-tune --reps 1 --m 64 --only Kimi-K2/tp1/o_proj"
IFS='|' read -ra cases <<< "${PZ_NCU_L2_CASES:-$DEF}"
for c in "${cases[@]}"; do
  IFS=';' read -r name kern skip envs cmd <<< "$c"
  echo "== $name: kernel $kern, skip $skip, env [$envs], $cmd"
  for M in "$M1" "$M2"; do
    env $envs timeout 180 ncu --clock-control none -k regex:"$kern" -s "$skip" -c 1 --metrics "$M" $cmd 2>&1 |
      grep -E "__|ERROR|rror" | sed 's/  */ /g'
  done
done
