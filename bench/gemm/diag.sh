#!/usr/bin/env bash
# Diagnostics for the GEMM-vs-read gap, then the full bench with the better W-load variant:
# graph timings of pinned configs with and without the L2::256B prefetch-size hint
# (PREZERO_GEMM_L2PF), ncu of the streaming read and of the kernels on Kimi-K2 TP4 qkv_a
# (30 MB, m=1). Usage: OUT=/dir bash bench/gemm/diag.sh   (builds through device.sh)
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/pz_gemm_out}; mkdir -p "$OUT"
PZ_GEMM_BUILD_ONLY=1 bash bench/gemm/device.sh || exit 1
B=/tmp/pz_gemm_build
. bench/device_env.sh
export PREZERO_CACHE_DIR=$OUT/cache
{
for pf in 0 1; do PREZERO_GEMM_L2PF=$pf timeout 60 $B/test_gemm 2>&1 | tail -1 | sed "s/^/test L2PF=$pf: /"; done
Q="--no-tune --reps 7 --m 1"
timeout 60 $B/bench_gemm --m 1 --only tp4 | grep -E "qkv_a|gate|o_proj|q_b"  # tunes, saves the table
for spec in "Kimi-K2/tp4/qkv_a 8,2,4,0" "Kimi-K2/tp4/qkv_a 8,1,4,1" \
            "Kimi-K2/tp4/gate 16,1,4,0" "Kimi-K2/tp4/o_proj 2,2,4,0" "Kimi-K2/tp4/q_b 8,1,4,1"; do
  set -- $spec
  for pf in 0 1; do
    echo "pinned $1 cfg=$2 L2PF=$pf: $(PREZERO_GEMM_L2PF=$pf PREZERO_BENCH_CFG=$2 timeout 60 $B/bench_gemm $Q --only $1 | grep -oE '1: *[0-9.]+' | head -1)"
  done
done
M="--metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_active.avg,sm__cycles_elapsed.avg,sm__warps_active.avg.per_cycle_active,lts__t_sectors_srcunit_tex_op_read.sum"
N="--no-tune --reps 3 --m 1 --only Kimi-K2/tp4/qkv_a"
echo "== ncu streaming read (30 MB)"
timeout 60 ncu --clock-control none -k regex:stream_read -s 1 -c 1 $M $B/bench_gemm $N 2>&1 | grep -E "stream_read|gpu__|dram__|sm__|lts__"
for pf in 0 1; do for cfg in 8,2,4,0 8,1,4,1; do
  echo "== ncu GEMM cfg=$cfg L2PF=$pf"
  PREZERO_GEMM_L2PF=$pf PREZERO_BENCH_CFG=$cfg timeout 60 ncu --clock-control none -k regex:gemm_s -s 1 -c 1 $M \
    $B/bench_gemm $N 2>&1 | grep -E "gemm_s|gpu__|dram__|sm__|lts__"
done; done
} > $OUT/diag.txt 2>&1
cat $OUT/diag.txt | cut -c1-160
# Full bench with the hint when it won on the ring kernel's qkv_a row by >= 3 %.
t0=$(grep "qkv_a cfg=8,2,4,0 L2PF=0" $OUT/diag.txt | grep -oE '[0-9.]+$'); t1=$(grep "qkv_a cfg=8,2,4,0 L2PF=1" $OUT/diag.txt | grep -oE '[0-9.]+$')
PF=$(awk -v a="${t0:-0}" -v b="${t1:-0}" 'BEGIN{print (b > 0 && a > 0 && b < 0.97 * a) ? 1 : 0}')
echo "== full bench with PREZERO_GEMM_L2PF=$PF"
rm -rf $OUT/cache; mkdir -p $OUT/cache
( time PREZERO_GEMM_L2PF=$PF timeout 200 $B/bench_gemm --json $OUT/gemm_h200.json --md $OUT/gemm_h200.md ) > $OUT/bench.txt 2>&1
echo "bench rc=$?"; grep -E "rows|real" $OUT/bench.txt; grep -E "tp4/(qkv_a|q_b|o_proj|gate) +m=(1|8|16|128) " $OUT/bench.txt | cut -c1-200
