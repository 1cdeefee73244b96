#!/usr/bin/env bash
# One whole GPU round: CMake build (CUDA, sm_90a), the CUDA tests through ctest,
# compute-sanitizer memcheck on the kernel tests, and the benchmarks, all written to $OUT.
# Usage, from the repository root on a GPU machine (carry .deps for cJSON):
#   OUT=/some/dir bash tools/device-check.sh [section ...]
# Sections (default: build tests sanitizer gemm ar attn moe step compare determinism; also racecheck):
#   build      configure + build into build-dev (always runs first; PZ_BUILD_TARGETS limits the targets)
# PZ_CACHE=dir starts from that GEMM tuner cache instead of an empty private one.
#   tests      ctest -L cuda (every CUDA test), plus the CPU suite when PZ_CPU_TESTS=1
#   sanitizer  compute-sanitizer memcheck on each CUDA test in quick mode (PZ_TEST_QUICK=1); CUDA API
#              return codes are not reported (the communicator expects cudaErrorPeerAccessAlreadyEnabled)
#   gemm ar attn moe step   `prezero bench <name>` into $OUT (PZ_GEMM_ARGS adds bench gemm options)
#   ar_procs   `prezero bench ar --procs 2` (one process per rank; --one-gpu when only one GPU is present)
#   attn_gqa   `prezero bench attn --layout gqa` (issue 17)
#   compare_gqa  `prezero compare` on GQA presets at TP 1 (PZ_GQA_CONFIGS, PZ_GQA_OSL), det_gqa the deterministic check
#   consumer   ctest installed_consumer: install, build examples/ with find_package, run its CPU and CUDA parts
#   racecheck  compute-sanitizer racecheck and synccheck on test_gemm (quick mode)
#   fresh      `prezero compare` (Kimi-K2, TP 1) on an empty cache: built-in table, then PREZERO_GEMM_BUILTIN=0
#   tune       `prezero tune` (PZ_TUNE_ARGS) into the private cache; later sections use that table
#   compare    `prezero compare` at TP 1 and, with 2 GPUs, TP 2 (PZ_COMPARE_ARGS adds options)
#   determinism  `prezero compare --deterministic` at TP 1 and 2: ON vs OFF bit-identity
#   quant      Kimi-K2.5 with INT4 W4A16 routed experts: `prezero bench moe --quant int4` (TP 1/2/4
#              shapes on one GPU, speed-up over bf16 in the same run) into moe_h200_int4.{json,md}, and
#              `prezero compare --config kimi_k25 --tp 1 --osl 128` (as many layers as fit) into
#              compare_kimi_k25_tp1 (PZ_QUANT_COMPARE_ARGS adds options)
# To test a committed tree while the working tree changes: git archive -o .deps/head.tar HEAD here, then on the
# GPU machine: mkdir -p /tmp/s && tar -xf .deps/head.tar -C /tmp/s && cp -r .deps /tmp/s && bash /tmp/s/tools/device-check.sh ...
# Results come back as $OUT/summary.txt (what ran, exit codes) and $OUT/results.tar.gz.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/pz_device_out}
W=$OUT/work
mkdir -p "$W"
export NCCL_NVLS_ENABLE=0
S=$OUT/summary.txt
: > "$S"
log() { echo "$*" | tee -a "$S"; }
run() { # run NAME TIMEOUT CMD... : logs rc and wall time, output in $W/NAME.txt
  local name=$1 t=$2; shift 2
  local t0=$(date +%s%N)
  timeout "$t" "$@" > "$W/$name.txt" 2>&1
  local rc=$?
  log "$(printf '%-28s rc=%-3s %6d ms' "$name" "$rc" $(( ($(date +%s%N) - t0) / 1000000 )))"
  return $rc
}

sections=${*:-"tests sanitizer gemm ar attn moe step compare determinism"}
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
log "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$ngpu; sections: $sections"

# cJSON travels as .deb packages (no registry on the GPU machine): unpacked into $CJ by the
# set-up the bench scripts share.
. bench/device_env.sh
# GEMM choices: a private cache, empty at first, so the table built into the library decides
# until the `tune` section writes this device's own table there.
export PREZERO_CACHE_DIR=${PZ_CACHE:-$W/cache} # PZ_CACHE: start from another cache (e.g. a saved table)
mkdir -p "$PREZERO_CACHE_DIR"
pack() { tar -czf "$OUT/results.tar.gz" -C "$OUT" work 2>/dev/null; }
B=build-dev
run build ${PZ_T_BUILD:-300} bash -c "cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$CJ/usr -DCMAKE_CUDA_ARCHITECTURES=90a && cmake --build $B -j16 ${PZ_BUILD_TARGETS:+--target $PZ_BUILD_TARGETS}" \
  || { tail -40 "$W/build.txt"; pack; exit 1; }
P=$B/prezero

for s in $sections; do
  case $s in
    tests)
      run ctest_cuda ${PZ_T_TESTS:-300} ctest --test-dir $B -L cuda --output-on-failure -j${PZ_CTEST_J:-1} --timeout ${PZ_T_TEST_EACH:-240}
      grep -E "tests passed|Failed|\*\*\*" "$W/ctest_cuda.txt" | tee -a "$S"
      if [ "${PZ_CPU_TESTS:-0}" = 1 ]; then run ctest_cpu 300 ctest --test-dir $B -LE cuda -j8; fi ;;
    sanitizer)
      for t in ${PZ_SANITIZE_TESTS:-test_gemm test_ar test_mla test_dense_ops test_moe}; do
        t=$B/tests/$t
        [ -x "$t" ] || continue
        PZ_TEST_QUICK=1 PZ_TEST_SMALL=1 PZ_TEST_REPLAYS=20 run "memcheck_$(basename $t)" ${PZ_T_SANITIZE:-120} \
          compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 "$t"
        grep -E "ERROR SUMMARY" "$W/memcheck_$(basename $t).txt" | tail -1 | tee -a "$S"
      done ;;
    fresh)  # compare on a fresh cache: the built-in table, then the heuristic alone
      mkdir -p $W/empty_cache
      PREZERO_CACHE_DIR=$W/empty_cache CUDA_VISIBLE_DEVICES=0 run compare_builtin ${PZ_T_COMPARE:-300} $P compare --config kimi_k2 --tp 1 ${PZ_COMPARE_ARGS:-} --out $W/compare_builtin
      PREZERO_GEMM_BUILTIN=0 PREZERO_CACHE_DIR=$W/empty_cache CUDA_VISIBLE_DEVICES=0 run compare_heuristic ${PZ_T_COMPARE:-300} $P compare --config kimi_k2 --tp 1 ${PZ_COMPARE_ARGS:-} --out $W/compare_heuristic ;;
    tune) run tune ${PZ_T_TUNE:-400} $P tune ${PZ_TUNE_ARGS:-}; tail -2 "$W/tune.txt" ;;
    gemm) run bench_gemm ${PZ_T_GEMM:-400} $P bench gemm --json $W/gemm_h200.json --md $W/gemm_h200.md ${PZ_GEMM_ARGS:-}
      tail -${PZ_GEMM_TAIL:-30} "$W/bench_gemm.txt" | cut -c1-200 ;;
    racecheck)  # racecheck + synccheck on PZ_RACECHECK_TESTS (default test_gemm), quick mode
      for t in ${PZ_RACECHECK_TESTS:-test_gemm}; do
        for tool in racecheck synccheck; do
          PZ_TEST_QUICK=1 PZ_TEST_SMALL=1 PZ_TEST_REPLAYS=5 run "${tool}_$t" ${PZ_T_SANITIZE:-150} \
            compute-sanitizer --tool $tool --error-exitcode 9 $B/tests/$t
          grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$W/${tool}_$t.txt" | tail -1 | tee -a "$S"
        done
      done ;;
    ar)
      run bench_ar_tp1 90 $P bench ar --tp 1 --json $W/ar_h200_tp1.json --md $W/ar_h200_tp1.md
      [ "$ngpu" -ge 2 ] && run bench_ar_tp2 120 $P bench ar --tp 2 --json $W/ar_h200x2_tp2.json --md $W/ar_h200x2_tp2.md ;;
    ar_procs)  # one process per rank (public multi-process API): two GPUs when present, else two processes on one
      if [ "$ngpu" -ge 2 ]; then run bench_ar_procs 200 $P bench ar --procs 2 --json $W/ar_procs_h200x2_tp2.json --md $W/ar_procs_h200x2_tp2.md
      else run bench_ar_procs 200 $P bench ar --procs 2 --one-gpu --json $W/ar_procs_h200_1gpu_tp2.json --md $W/ar_procs_h200_1gpu_tp2.md; fi
      grep -h "^| " $W/ar_procs_*.md 2>/dev/null | tee -a "$S" ;;
    attn) run bench_attn ${PZ_T_ATTN:-150} $P bench attn --json $W/attn_h200.json --md $W/attn_h200.md ;;
    moe) run bench_moe 120 $P bench moe --json $W/moe_h200.json --md $W/moe_h200.md ;;
    step) run bench_step ${PZ_T_STEP:-200} $P bench step --json $W/step_h200.json --md $W/step_h200.md ;;
    compare)
      CUDA_VISIBLE_DEVICES=0 run compare_tp1 ${PZ_T_COMPARE:-300} $P compare --config kimi_k2 --tp 1 ${PZ_COMPARE_ARGS:-} --out $W/compare_tp1
      [ "$ngpu" -ge 2 ] && run compare_tp2 ${PZ_T_COMPARE:-300} $P compare --config kimi_k2 --tp 2 ${PZ_COMPARE_ARGS:-} ${PZ_COMPARE_TP2_ARGS:-} --out $W/compare_tp2 ;;
    determinism)  # ON vs OFF must be bit-identical with at most 2 split-K splits (docs/ARCHITECTURE.md section 5)
      CUDA_VISIBLE_DEVICES=0 run det_tp1 ${PZ_T_COMPARE:-300} $P compare --config kimi_k2 --tp 1 --deterministic --no-profile \
        --osl ${PZ_DET_OSL:-16} --rounds 2 --out $W/compare_det_tp1
      [ "$ngpu" -ge 2 ] && run det_tp2 ${PZ_T_COMPARE:-300} $P compare --config kimi_k2 --tp 2 --layers 3 --deterministic \
        --no-profile --osl ${PZ_DET_OSL:-16} --rounds 2 --out $W/compare_det_tp2
      grep -h "^Verdict" $W/det_tp*.txt | cut -c1-160 | tee -a "$S" ;;
    quant)  # Kimi-K2.5: INT4 routed experts (issue 15)
      run bench_moe_int4 ${PZ_T_MOE_Q:-240} $P bench moe --quant int4 --json $W/moe_h200_int4.json --md $W/moe_h200_int4.md
      CUDA_VISIBLE_DEVICES=0 run compare_kimi_k25_tp1 ${PZ_T_COMPARE_Q:-540} $P compare --config kimi_k25 --tp 1 --osl 128 \
        ${PZ_QUANT_COMPARE_ARGS:-} --out $W/compare_kimi_k25_tp1
      grep -h "layers fit\|^Notes" $W/compare_kimi_k25_tp1/compare.md 2>/dev/null | cut -c1-240 | tee -a "$S" ;;
    consumer) run consumer ${PZ_T_CONSUMER:-300} ctest --test-dir $B -R installed_consumer -V
      grep -E "CUDA part|all checks passed|FAIL" "$W/consumer.txt" | sed 's/^[0-9]*: //' | tee -a "$S" ;;
    attn_gqa) run bench_attn_gqa ${PZ_T_ATTN:-150} $P bench attn --layout gqa --json $W/attn_gqa_h200.json --md $W/attn_gqa_h200.md
      tail -${PZ_ATTN_TAIL:-25} "$W/bench_attn_gqa.txt" | cut -c1-200 ;;
    compare_gqa)  # issue 17: prezero compare on GQA presets at TP 1 (as many layers as fit), short decodes
      for c in ${PZ_GQA_CONFIGS:-llama3_1_70b qwen3_30b_a3b}; do
        CUDA_VISIBLE_DEVICES=0 run compare_${c}_tp1 ${PZ_T_COMPARE:-300} $P compare --config $c --tp 1 --osl ${PZ_GQA_OSL:-64} \
          ${PZ_COMPARE_ARGS:-} --out $W/compare_${c}_tp1
        grep -h "layers fit\|^Verdict\|^| 4 \|^| 64 " $W/compare_${c}_tp1/compare.md 2>/dev/null | cut -c1-200 | tee -a "$S"
      done ;;
    det_gqa)  # ON vs OFF bit-identity on GQA presets (at most 2 splits), a few layers
      for c in ${PZ_GQA_DET_CONFIGS:-llama3_1_8b qwen3_30b_a3b}; do
        CUDA_VISIBLE_DEVICES=0 run det_${c} ${PZ_T_COMPARE:-300} $P compare --config $c --tp 1 --layers 4 --deterministic --no-profile \
          --osl ${PZ_DET_OSL:-16} --rounds 1 --conc 4,32 --out $W/compare_det_${c}
        grep -h "^Verdict" $W/det_${c}.txt | cut -c1-160 | tee -a "$S"
      done ;;
    build) ;;
    *) log "unknown section $s" ;;
  esac
  pack
done
tar -czf "$OUT/results.tar.gz" -C "$OUT" work
log "== done $(date -u +%FT%TZ)"
