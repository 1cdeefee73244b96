#!/usr/bin/env bash
# Diagnostics for the GEMM-vs-read gap (run after device.sh built /tmp/pz_gemm_build):
# ncu of the streaming read, the register-ring kernel and the staged cp.async kernel on
# Kimi-K2 TP4 qkv_a (30 MB) at m=1, plus graph timings of the pinned configs.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/pz_gemm_out}; mkdir -p "$OUT"
B=/tmp/pz_gemm_build; CJ=/tmp/cj
export LD_LIBRARY_PATH=$CJ/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export PREZERO_CACHE_DIR=$OUT/cache
M="--metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_active.avg,sm__cycles_elapsed.avg,sm__warps_active.avg.per_cycle_active,lts__t_sectors_srcunit_tex_op_read.sum"
Q="--reps 3 --m 1 --only Kimi-K2/tp4/qkv_a"
timeout 60 $B/bench_gemm --m 1 --only Kimi-K2/tp4/qkv_a | grep qkv_a   # tunes, saves the table
echo "== ncu streaming read"
timeout 60 ncu --clock-control none -k regex:stream_read -s 1 -c 1 $M $B/bench_gemm --no-tune $Q 2>&1 | grep -E "stream_read|gpu__|dram__|sm__|lts__"
for cfg in "8,2,4,0" "8,1,4,1" "8,1,4,2" "16,1,4,2"; do
  echo "== pinned flavour-1 config splits,wt,warps,wn = $cfg"
  PREZERO_BENCH_CFG=$cfg timeout 60 $B/bench_gemm --no-tune --reps 7 --m 1 --only Kimi-K2/tp4/qkv_a | grep qkv_a
  PREZERO_BENCH_CFG=$cfg timeout 60 ncu --clock-control none -k regex:gemm_s -s 1 -c 1 $M \
    $B/bench_gemm --no-tune $Q 2>&1 | grep -E "gemm_s|gpu__|dram__|sm__|lts__"
done
