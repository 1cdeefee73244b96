#!/usr/bin/env bash
# `prezero compare` on the 2 x H200 machine: builds the CLI and the CUPTI test (CMake, sm_90a),
# runs the test, then Kimi-K2 prezero OFF vs ON at TP 1 (GPU 0) and TP 2 (GPUs 0,1).
# Usage (repository root, .deps carried for cJSON): OUT=/some/dir bash bench/compare/device.sh
# Short decode (OSL 32, 2 rounds) so build + both runs stay near 4 minutes; drop --osl for the
# full 8192/1024 workload. Results: $OUT/tp1/ and $OUT/tp2/ (compare.json, compare.md, plot data).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/pz_compare_out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
. bench/device_env.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
B=/tmp/pz_build_compare
{
  nvidia-smi --query-gpu=index,name,clocks.sm,clocks.max.sm,memory.used,memory.total --format=csv
  cmake -S . -B $B -DCMAKE_PREFIX_PATH=$CJ/usr -DCMAKE_BUILD_TYPE=Release &&
    cmake --build $B -j "$(nproc)" --target prezero_cli test_profile
} > "$OUT/build.log" 2>&1
echo "build rc=$?"
[ -x $B/prezero ] || { tail -40 "$OUT/build.log"; exit 1; }

echo "== test_profile (CUPTI attribution)"
timeout 60 $B/tests/test_profile > "$OUT/test_profile.log" 2>&1
echo "test_profile rc=$?"; tail -12 "$OUT/test_profile.log"

# GEMM choices: the H200 tuner table recorded by `bench gemm` (shapes it does not hold fall back
# to the heuristic), in a cache folder of this run.
export PREZERO_CACHE_DIR=$OUT/cache
mkdir -p "$PREZERO_CACHE_DIR"
[ -f bench/results/gemm_h200_tuner_table.json ] &&
  cp bench/results/gemm_h200_tuner_table.json "$PREZERO_CACHE_DIR/gemm_NVIDIA_H200_132sm.json"

echo "== smoke: tiny preset, TP 1, seconds"
CUDA_VISIBLE_DEVICES=0 timeout 60 $B/prezero compare --config tiny --tp 1 --isl 64 --osl 8 --conc 1,2,4 \
  --out "$OUT/tiny" > "$OUT/tiny.log" 2> "$OUT/tiny.err"
echo "tiny rc=$?"; grep -v '^\[compare\]' "$OUT/tiny.err" | tail -4; grep -E "^\| (1|2|4) \||Verdict|changed" "$OUT/tiny/compare.md" 2>/dev/null | head -12

echo "== TP 1 (GPU 0): layers chosen from free memory (2 of Kimi-K2's 61 fit twice)"
CUDA_VISIBLE_DEVICES=0 timeout 170 $B/prezero compare --config kimi_k2 --tp 1 --isl 8192 --osl 32 \
  --conc 4,8,16,32,64,128 --rounds 2 --out "$OUT/tp1" > "$OUT/tp1.log" 2> "$OUT/tp1.err"
echo "tp1 rc=$?"; grep -v '^\[compare\]' "$OUT/tp1.err" | tail -5; cat "$OUT/tp1/compare.md" 2>/dev/null
[ -f "$OUT/tp1/throughput.png" ] || python3 tools/plot_compare.py "$OUT/tp1/compare.json" 2>&1 | tail -1

echo "== TP 2 (GPUs 0,1): 3 layers (dense layer 0 + 2 MoE layers)"
CUDA_VISIBLE_DEVICES=0,1 timeout 190 $B/prezero compare --config kimi_k2 --tp 2 --layers 3 --isl 8192 --osl 32 \
  --conc 4,8,16,32,64,128 --rounds 2 --out "$OUT/tp2" > "$OUT/tp2.log" 2> "$OUT/tp2.err"
echo "tp2 rc=$?"; grep -v '^\[compare\]' "$OUT/tp2.err" | tail -5; cat "$OUT/tp2/compare.md" 2>/dev/null
[ -f "$OUT/tp2/throughput.png" ] || python3 tools/plot_compare.py "$OUT/tp2/compare.json" 2>&1 | tail -1
