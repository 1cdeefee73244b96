#!/usr/bin/env bash
# One whole GPU round: CMake build (CUDA, sm_90a), the CUDA tests through ctest,
# compute-sanitizer memcheck on the kernel tests, and the benchmarks, all written to $OUT.
# Usage, from the repository root on a GPU machine (carry .deps for cJSON):
#   OUT=/some/dir bash tools/device-check.sh [section ...]
# Sections (default: build tests sanitizer gemm ar attn moe step compare determinism; the others when named):
#   build      configure + build into build-dev (always runs first; PZ_BUILD_TARGETS limits the targets)
# PZ_CACHE=dir starts from that GEMM tuner cache instead of an empty private one.
#   tests      ctest -L cuda (every CUDA test; PZ_CTEST_R=regex: those only), plus the CPU suite when PZ_CPU_TESTS=1
#   sanitizer  compute-sanitizer memcheck on each CUDA test in quick mode (PZ_TEST_QUICK=1); CUDA API
#              return codes are not reported (the communicator expects cudaErrorPeerAccessAlreadyEnabled)
#   gemm ar attn moe step   `prezero bench <name>` into $OUT (PZ_GEMM_ARGS adds bench gemm options)
#   step_k25   `prezero bench step --config kimi_k25` (INT4 experts) into step_kimi_k25_h200.{json,md}
#   mlp_ab     `prezero bench step` (Kimi-K2, Kimi-K2.5) with the MLPs fused (PREZERO_MLP_GEMM=0), then by batch (the default)
#   ar_procs   `prezero bench ar --procs 2` (one process per rank; --one-gpu when only one GPU is present), then
#              the --rank/--world/--id-file form (each rank its own command) into ar_ranks_tp2.md
#   attn_gqa   `prezero bench attn --layout gqa` (issue 17)
#   attn_v3    `prezero bench attn` TP 1/2/4/8 paged (ctx 8192) and mixed [1024, 16384]: attention v3 (default), then v2
#   attn_waves `prezero bench attn` TP 1/2/4/8 paged (ctx 8192) and mixed [1024, 16384]: MLA splits by two waves (default),
#              then PREZERO_MLA_WAVES=1 (one wave)
#   attn_splits  `prezero bench attn` TP 1/2, m 64/128, mixed and uniform contexts with PREZERO_MLA_SPLITS=2 and 4
#   quant_ab   `prezero bench moe --quant int4` per W4A16 K split or switch (PZ_AB_LIST, e.g. "base nodirect dn1:up1")
#   pdl        `prezero bench gemm --no-tune` (PZ_PDL_ONLY, default Kimi-K2/tp1), `prezero bench step` (PZ_PDL_STEP_ARGS)
#              and `prezero bench attn` (TP 1/2, paged: its op column holds q_b and o_proj), each with the GEMMs'
#              programmatic dependent launch (the default) then PREZERO_PDL=0
#   ks_ab      `prezero bench gemm --no-tune` (PZ_KS_ONLY, default /tp1/) with PREZERO_GEMM_WG_KS=2, 1, 4, 1 (k-blocks per wgmma ring stage)
#   ksrule_ab  `prezero bench gemm --no-tune` (every row; PZ_KS_ONLY narrows): the default k-blocks per wgmma stage, then PREZERO_GEMM_WG_KS=1, twice
#   attn_lazy  `prezero bench attn`: v4 with its lazy rescale (the default) then PREZERO_MLA_LAZY=0, TP 1/2 (PZ_ATTN4_ARGS),
#              context 8192 paged and mixed [1024, 16384]
#   attn_v4    `prezero bench attn`: the default (v4 ping-pong above 16 heads) then PREZERO_MLA_ATTN=3, TP 1/2/4/8, paged,
#              context 8192 and mixed [1024, 16384]
#   ncu_attn   ncu of the MLA split attention and combine kernels (PZ_NCU_M, default 4)
#   ncu_src    per-SASS-line warp stall samples (ncu SourceCounters) of the v4 attention and the wgmma GEMM (bench/ncu_src.sh)
#   ncu_moe    ncu of the W4A16 expert kernel at TP 1 (PZ_NCU_M, default 64)
#   ncu_l2     L2 and DRAM traffic by kind (reads, hits, writes, fabric) of the plain read and the decode kernels (bench/ncu_l2.sh)
#   stream_pattern  HBM read rate against the number of concurrent streams and the bytes per visit (bench/dev/stream_pattern.cu)
#   route_ab   `prezero bench moe --quant int4`: the router's two-stage top-k, then PREZERO_MOE_ROUTE_TOPK=0
#   combine_ab `prezero bench attn --paged`: the MLA combine's layouts (PREZERO_MLA_COMBINE=0, =1, unset), alternated twice
#   fork_ab    `prezero bench moe --quant int4` with PREZERO_MOE_FORK=0, 1, 2 and unset (the default), alternated twice
#   proj_ab    `prezero bench attn --paged` and `bench step` with the MLA absorb / W_UV exact (PREZERO_MLA_PROJ=0) and
#              on tensor cores (the default), alternated
#   ab_ref     `prezero $PZ_AB_ARGS` with the binary of another commit (.deps/ref.tar) and the tree's, alternated
#   moe_times  each kernel of `prezero bench moe --quant int4 --tp PZ_NCU_TP --m PZ_NCU_M` (defaults 1, 4) timed alone under ncu
#   moe_int4   `prezero bench moe --quant int4` alone (PZ_MOE_ARGS adds options)
#   quant_fixed  `PREZERO_MOE_W4_WK=0 prezero bench moe --quant int4` (after quant or moe_int4, for the A/B)
#   quant_wk   `prezero bench moe --quant int4` per W4A16 K split (PZ_WK_LIST, default "dn1 dn2 dn8 up1"; PZ_WK_ARGS)
#   attn_mixed `prezero bench attn` on mixed contexts [1024, 16384], paged: balanced schedule, then PREZERO_MLA_BALANCE=0
#   step_pad   `prezero bench step --batch 32,128 --rows 17`: padded steps, padding rows at one position, then
#              PREZERO_PAD_ATTN=0 (their whole context)
#   compare_gqa  `prezero compare` on GQA presets at TP 1 (PZ_GQA_CONFIGS, PZ_GQA_OSL), det_gqa the deterministic check
#   consumer   ctest installed_consumer: install, build examples/ with find_package, run its CPU and CUDA parts
#   racecheck  compute-sanitizer racecheck and synccheck on test_gemm (quick mode)
#   sweep      compute-sanitizer memcheck, racecheck, synccheck and initcheck on every CUDA test (the tests
#              labelled cuda: ctest -L cuda -N), quick mode (PZ_TEST_QUICK=1 PZ_TEST_SMALL=1), each run bounded
#              by PZ_T_SWEEP s (default 120; PZ_T_SWEEP_<test> for one test; test_ar_mp and test_engine_mp 300:
#              they wait out deliberate peer timeouts; test_gqa_exec and test_step 300; test_exec, test_golden_cuda, test_ar and test_mla 240; PZ_SWEEP_ENV_<tool>_<test> adds an environment to one run, initcheck on test_mla forces our GEMM: see sweep_one); a host-only test that
#              makes no CUDA call is judged by its own exit code (compute-sanitizer refuses such a target); the tests' own deadlines are scaled by PZ_TEST_TIMEOUT_SCALE
#              (tests/pz_test.h; PZ_SWEEP_TIMEOUT_SCALE, default 20); every run sets PREZERO_GATE_CALIBRATE=0 (no
#              fill-gate timing: under racecheck it outgrew host memory), PZ_SWEEP_CALIBRATE=1 keeps the timing. Each report is classified by
#              tools/sanitizer-classify.sh against tools/sanitizer-known.txt (vendor kernels only): known-vendor
#              hazards are counted, anything else fails the run. PZ_SWEEP_TESTS / PZ_SWEEP_TOOLS narrow the
#              sweep, PZ_SWEEP_J runs that many at once (default 1), PZ_SWEEP_BUDGET (s, default none) starts no
#              run after that much time (those are listed NOT RUN). Table per test x tool: $OUT/summary.txt
#              and $OUT/sweep_summary.txt, logs work/sweep/<tool>_<test>.txt
#   soak_bg / soak_wait  the same soak in a session of its own (setsid), for runs longer than one device call:
#              soak_bg starts it (files in PZ_SOAK_DIR, default /tmp/pz_soak), a later call's soak_wait collects it;
#              the next call must follow within the machine's idle release (30 s) or the soak is lost with it.
#              At ~157 replays/s (round 29), PZ_SOAK_ARGS="--seconds 660 --check-every 16" passes 100,000 replays
#   compare_procs  `prezero compare --procs 2` (PZ_PROCS_CONFIG, default tiny) into compare_procs2
#   soak       `prezero soak` (default: kimi_k2, 2 layers, TP 1, 60 s; PZ_SOAK_ARGS adds options, PZ_T_SOAK
#              bounds it, default 300 s: raise it with --seconds) into soak_h200.json / soak_h200.md
#   fresh      `prezero compare` (Kimi-K2, TP 1) on an empty cache: built-in table, then PREZERO_GEMM_BUILTIN=0
#   tune       `prezero tune` (PZ_TUNE_ARGS) into the private cache; later sections use that table
#   compare    `prezero compare` at TP 1 and, with 2 GPUs, TP 2 (PZ_COMPARE_ARGS adds options)
#   determinism  `prezero compare --deterministic` at TP 1 and 2: ON vs OFF bit-identity
#   model_ckpt  `prezero run --model DIR --prompt-ids` on the CPU and on CUDA (TP 1, and TP 2 with 2 GPUs) for each
#              checkpoint under PZ_CKPT_DIR (default .deps/ckpt; its prompt_ids.txt holds the prompts), tokens and
#              max |logit(cuda) - logit(cpu)| into the summary
#   run_procs  `prezero run --procs 2` (one process per TP rank, issue 16) beside `prezero run --tp 2 --device cpu`
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

# sweep: one compute-sanitizer run of test $1 under tool $2 into $W/sweep/$2_$1.txt, then its verdict
# line into $W/sweep/$2_$1.verdict (PASS, SKIP (exit 77), TIMEOUT, FAIL: the test's exit code or an
# unknown report; tools/sanitizer-classify.sh decides known-vendor vs unknown).
sweep_one() {
  local t=$1 tool=$2 f=$W/sweep/$2_$1 tv=PZ_T_SWEEP_$1 lim rc cls crc v t0
  lim=${!tv:-}
  # the multi-process tests wait out deliberate peer timeouts; the engine-level ones run whole decodes
  [ -z "$lim" ] && case $t in test_ar_mp|test_engine_mp|test_gqa_exec|test_step) lim=300 ;;
    test_golden_cuda|test_exec|test_ar|test_mla) lim=240 ;;
    *) lim=${PZ_T_SWEEP:-120} ;; esac
  # initcheck on test_mla: cuBLAS's Hopper kernels store C with TMA, which initcheck does not track, so our MLA
  # kernel's reads of a cuBLAS-written q_b output are reported as uninitialised (73,063 reports, round 30); with
  # our split-K GEMM forced the same run reports 0. PZ_SWEEP_ENV_<tool>_<test> ("VAR=value ...") sets such an
  # environment for one run; the sweep summary names it.
  local ev=PZ_SWEEP_ENV_${tool}_$t extra
  extra=${!ev-}
  [ -z "${!ev+x}" ] && [ "$tool.$t" = initcheck.test_mla ] && extra="PREZERO_GEMM_FORCE=atomic"
  # PREZERO_GATE_CALIBRATE=0: no fill-gate timing at engine creation. Its ~2,000 all-reduce launches
  # (m = 128, H = 7168, with fills) grew racecheck's host memory by ~0.85 GB/s until the OOM killer ended
  # test_ar, test_gqa_exec and test_golden_cuda (round 38: the kernel log). PZ_SWEEP_CALIBRATE=1 keeps it for
  # the whole sweep, PZ_SWEEP_ENV_<tool>_<test>="PREZERO_GATE_CALIBRATE=1" for one run (it comes later, so it wins).
  t0=$(date +%s%N)
  env PREZERO_GATE_CALIBRATE=${PZ_SWEEP_CALIBRATE:-0} $extra PZ_TEST_QUICK=1 PZ_TEST_SMALL=1 PZ_TEST_REPLAYS=${PZ_SWEEP_REPLAYS:-5} PZ_AR_MP_REPLAYS=${PZ_SWEEP_REPLAYS:-20} \
    PZ_TEST_TIMEOUT_SCALE=${PZ_SWEEP_TIMEOUT_SCALE:-20} timeout -k 15 "$lim" \
    $CS --tool "$tool" --report-api-errors no --print-limit 100000 "$B/tests/$t" > "$f.txt" 2>&1
  rc=$?
  cls=$(bash tools/sanitizer-classify.sh "$tool" "$f.txt" 2>&1); crc=$?
  if [ $rc != 0 ] && grep -q "Target application terminated before first instrumented API call" "$f.txt"; then
    # a host-only test (no CUDA call): nothing to instrument; its verdict is its own exit code, run plainly
    PZ_TEST_QUICK=1 PZ_TEST_SMALL=1 timeout "$lim" "$B/tests/$t" > "$f.plain.txt" 2>&1
    rc=$?; cls="no CUDA call to instrument (host-only test); its exit code without the sanitizer"; crc=0
  fi
  if [ $rc != 0 ] && grep -q "process didn't terminate successfully" "$f.txt"; then
    # the target ended abnormally (a signal; seen under racecheck with no report): keep what the machine says
    { echo "--- at the verdict: free -m"; free -m; echo "--- kernel log: OOM killer, faults"
      dmesg 2>/dev/null | grep -iE "killed process|out of memory|oom-kill|segfault|traps:" | tail -5; } >> "$f.txt" 2>&1
    cls="$cls; kernel log: $(dmesg 2>/dev/null | grep -iE 'killed process|segfault|traps:' | tail -1 | cut -c1-100)"
  fi
  if [ $rc = 124 ] || [ $rc = 137 ]; then v=TIMEOUT
  elif [ $crc = 2 ]; then v=FAIL cls="known-hazard list: $cls"
  elif [ $crc != 0 ]; then v=FAIL
  elif [ $rc = 77 ]; then v=SKIP
  elif [ $rc != 0 ]; then v=FAIL
  else v=PASS; fi
  printf '%-28s %-10s %-8s rc=%-3s %6.1f s  %s%s\n' "$t" "$tool" "$v" "$rc" \
    "$(( ($(date +%s%N) - t0) / 1000000 ))e-3" "$cls" "${extra:+ [env: $extra]}" > "$f.verdict"
}
sweep_section() {
  CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  [ -x "$CS" ] || { log "sweep: compute-sanitizer not found (PATH, /usr/local/cuda/bin): FAIL"; return; }
  mkdir -p "$W/sweep"
  local tests=${PZ_SWEEP_TESTS:-$(ctest --test-dir $B -L cuda -N 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: *\([^ ]*\).*/\1/p')}
  local tools=${PZ_SWEEP_TOOLS:-memcheck racecheck synccheck initcheck} t tool n=0 t0=$(date +%s) order=()
  for t in $tests; do
    for tool in $tools; do
      order+=("${tool}_$t")
      if [ ! -x "$B/tests/$t" ]; then
        printf '%-28s %-10s %-8s %s\n' "$t" "$tool" FAIL "no binary $B/tests/$t" > "$W/sweep/${tool}_$t.verdict"; continue
      fi
      if [ -n "${PZ_SWEEP_BUDGET:-}" ] && [ $(( $(date +%s) - t0 )) -ge "$PZ_SWEEP_BUDGET" ]; then
        printf '%-28s %-10s %-8s %s\n' "$t" "$tool" "NOT RUN" "PZ_SWEEP_BUDGET=$PZ_SWEEP_BUDGET s spent" > "$W/sweep/${tool}_$t.verdict"; continue
      fi
      sweep_one "$t" "$tool" &
      n=$((n + 1))
      [ $n -ge "${PZ_SWEEP_J:-1}" ] && { wait -n; n=$((n - 1)); }
    done
  done
  wait
  local sum=$W/sweep_summary.txt
  { echo "sweep: compute-sanitizer x CUDA test, quick mode, PZ_TEST_TIMEOUT_SCALE=${PZ_SWEEP_TIMEOUT_SCALE:-20}," \
      "${PZ_T_SWEEP:-120} s per run, PREZERO_GATE_CALIBRATE=${PZ_SWEEP_CALIBRATE:-0}; known vendor hazards: tools/sanitizer-known.txt"
    printf '%-28s %-10s %-8s %s\n' test tool verdict "exit, time, reports (known_vendor: in tools/sanitizer-known.txt)"
    for k in "${order[@]}"; do cat "$W/sweep/$k.verdict"; done
    awk '{v = $3 == "NOT" ? "NOT RUN" : $3; c[v]++} END {printf "sweep: %d runs: %d PASS, %d SKIP, %d FAIL, %d TIMEOUT, %d NOT RUN\n", NR, c["PASS"], c["SKIP"], c["FAIL"], c["TIMEOUT"], c["NOT RUN"]}' \
      $(for k in "${order[@]}"; do echo "$W/sweep/$k.verdict"; done)
  } > "$sum"
  cp "$sum" "$OUT/sweep_summary.txt"
  tee -a "$S" < "$sum"
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
      run ctest_cuda ${PZ_T_TESTS:-300} ctest --test-dir $B -L cuda ${PZ_CTEST_R:+-R "$PZ_CTEST_R"} --output-on-failure -j${PZ_CTEST_J:-1} --timeout ${PZ_T_TEST_EACH:-240}
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
      grep -h "^| " $W/ar_procs_*.md 2>/dev/null | tee -a "$S"
      # the same with each rank its own command (--rank/--world/--id-file): rank 1 first, waiting for the id
      og=$([ "$ngpu" -ge 2 ] || echo --one-gpu)
      rm -f $W/ar_ranks.id $W/ar_ranks.id.results
      ( timeout 200 $P bench ar --rank 1 --world 2 --id-file $W/ar_ranks.id $og > $W/ar_ranks_r1.txt 2>&1 ) &
      run bench_ar_ranks 200 $P bench ar --rank 0 --world 2 --id-file $W/ar_ranks.id $og --md $W/ar_ranks_tp2.md
      wait
      grep -h "^| \|failed" $W/ar_ranks_tp2.md $W/ar_ranks_r1.txt 2>/dev/null | tee -a "$S" ;;
    attn) run bench_attn ${PZ_T_ATTN:-150} $P bench attn --json $W/attn_h200.json --md $W/attn_h200.md ;;
    moe) run bench_moe 120 $P bench moe --json $W/moe_h200.json --md $W/moe_h200.md ;;
    step) run bench_step ${PZ_T_STEP:-200} $P bench step --json $W/step_h200.json --md $W/step_h200.md ;;
    step_k25)  # Kimi-K2.5 (INT4 routed experts) decode steps, ON vs OFF (PZ_STEP_K25_ARGS adds options)
      run bench_step_k25 ${PZ_T_STEP:-200} $P bench step --config kimi_k25 ${PZ_STEP_K25_ARGS:-} \
        --json $W/step_kimi_k25_h200.json --md $W/step_kimi_k25_h200.md
      grep -E "^\| [0-9]" $W/step_kimi_k25_h200.md | sed 's/^/step_k25 /' | tee -a "$S" ;;
    mlp_ab)  # the bf16 SwiGLU MLPs (dense layer, shared experts) fused / as GEMMs: `bench step` (Kimi-K2, its dense layer
             # first) and `bench step --config kimi_k25` with PREZERO_MLP_GEMM=0, then unset (by batch), alternated
             # PZ_MLP_AB_ROUNDS times (default 1); PZ_MLP_AB_ARGS adds options to both
      for r in $(seq 1 ${PZ_MLP_AB_ROUNDS:-1}); do
        for v in 0 def; do
          e=""; [ $v = def ] || e="PREZERO_MLP_GEMM=$v"
          for cfg in kimi_k2 kimi_k25; do
            run bench_step_mlp${v}_${cfg}_r$r ${PZ_T_STEP:-200} env $e $P bench step --config $cfg ${PZ_MLP_AB_ARGS:-} \
              --json $W/step_mlp${v}_${cfg}_r$r.json --md $W/step_mlp${v}_${cfg}_r$r.md
            grep -E "^\| [0-9]" $W/step_mlp${v}_${cfg}_r$r.md | sed "s/^/mlp$v $cfg r$r /" | tee -a "$S"
          done
        done
      done ;;
    step_pad)  # padded steps: 17 sequences in the graphs of 32 and 128, padding rows at one
      # position (default) and at their whole context (PREZERO_PAD_ATTN=0), Kimi-K2 3 layers, TP 1, ON and OFF
      run bench_step_pad ${PZ_T_STEP:-200} $P bench step --tp 1 --batch 32,128 --rows 17 --rounds 2 \
        --json $W/step_pad_h200.json --md $W/step_pad_h200.md
      PREZERO_PAD_ATTN=0 run bench_step_pad_former ${PZ_T_STEP:-200} $P bench step --tp 1 --batch 32,128 --rows 17 \
        --rounds 2 --json $W/step_pad_former_h200.json --md $W/step_pad_former_h200.md ;;
    compare)
      CUDA_VISIBLE_DEVICES=0 run compare_tp1 ${PZ_T_COMPARE:-300} $P compare --config kimi_k2 --tp 1 ${PZ_COMPARE_ARGS:-} --out $W/compare_tp1
      [ "$ngpu" -ge 2 ] && run compare_tp2 ${PZ_T_COMPARE:-300} $P compare --config kimi_k2 --tp 2 ${PZ_COMPARE_ARGS:-} ${PZ_COMPARE_TP2_ARGS:-} --out $W/compare_tp2 ;;
    determinism)  # ON vs OFF must be bit-identical with at most 2 split-K splits (docs/ARCHITECTURE.md section 5)
      CUDA_VISIBLE_DEVICES=0 run det_tp1 ${PZ_T_COMPARE:-300} $P compare --config kimi_k2 --tp 1 --deterministic --no-profile \
        --osl ${PZ_DET_OSL:-16} --rounds 2 --out $W/compare_det_tp1
      [ "$ngpu" -ge 2 ] && run det_tp2 ${PZ_T_COMPARE:-300} $P compare --config kimi_k2 --tp 2 --layers 3 --deterministic \
        --no-profile --osl ${PZ_DET_OSL:-16} --rounds 2 --out $W/compare_det_tp2
      grep -h "^Verdict" $W/det_tp*.txt | cut -c1-160 | tee -a "$S" ;;
    model_ckpt)  # checkpoints written by other tools (GPTQ, compressed-tensors INT4 / FP8): CUDA vs CPU, same prompts
      for d in ${PZ_CKPT_DIR:-.deps/ckpt}/*/; do
        n=$(basename $d); pr=$(cat $d/prompt_ids.txt 2>/dev/null || echo "1,2,3;4,5")
        for tp in 1 $([ "$ngpu" -ge 2 ] && echo 2); do
          for dev in cpu cuda; do
            run ckpt_${n}_tp${tp}_$dev 240 $P run --model $d --tp $tp --device $dev --prompt-ids "$pr" --steps 6 \
              --logits $W/ckpt_${n}_tp${tp}_$dev.f32
            grep -h "^seq" $W/ckpt_${n}_tp${tp}_$dev.txt | tr '\n' ' ' | sed "s/^/$n tp$tp $dev: /" | tee -a "$S"; echo | tee -a "$S"
          done
          paste <(od -An -v -w4 -f $W/ckpt_${n}_tp${tp}_cpu.f32) <(od -An -v -w4 -f $W/ckpt_${n}_tp${tp}_cuda.f32) 2>/dev/null |
            awk -v n="$n tp$tp" '{d=$1-$2; if(d<0)d=-d; if(d>m)m=d; a=$1<0?-$1:$1; if(a>x)x=a; c++}
              END{printf "%s: %d logits, max |cuda - cpu| %.5f, max |logit| %.3f\n", n, c, m, x}' | tee -a "$S"
        done
      done ;;
    run_procs)  # prezero run with one process per rank (--procs 2: two GPUs when present, else both on GPU 0),
                # beside the CPU engine at TP 2 (the same tokens but at near ties)
      run run_procs2 ${PZ_T_RUN_PROCS:-240} $P run --procs 2 --steps 8 --context 64
      run run_cpu_tp2 120 $P run --tp 2 --device cpu --steps 8 --context 64
      grep -h "^step\|^prompt\|^timing" $W/run_procs2.txt | sed 's/^/procs2 /' | tee -a "$S"
      grep -h "^step\|^prompt" $W/run_cpu_tp2.txt | sed 's/^/cpu_tp2 /' | tee -a "$S" ;;
    quant)  # Kimi-K2.5: INT4 routed experts (issue 15)
      run bench_moe_int4 ${PZ_T_MOE_Q:-240} $P bench moe --quant int4 --json $W/moe_h200_int4.json --md $W/moe_h200_int4.md
      CUDA_VISIBLE_DEVICES=0 run compare_kimi_k25_tp1 ${PZ_T_COMPARE_Q:-540} $P compare --config kimi_k25 --tp 1 --osl 128 \
        ${PZ_QUANT_COMPARE_ARGS:-} --out $W/compare_kimi_k25_tp1
      grep -h "layers fit\|^Notes" $W/compare_kimi_k25_tp1/compare.md 2>/dev/null | cut -c1-240 | tee -a "$S" ;;
    moe_int4)  # issue 15: bench moe --quant int4 alone (PZ_MOE_ARGS adds options), no compare
      run bench_moe_int4 ${PZ_T_MOE_Q:-240} $P bench moe --quant int4 ${PZ_MOE_ARGS:-} --json $W/moe_h200_int4.json --md $W/moe_h200_int4.md ;;
    quant_fixed)  # issue 15: bench moe --quant int4 with PREZERO_MOE_W4_WK=0 (the fixed K splits), A/B against quant's
      # or moe_int4's run (PZ_MOE_ARGS as there)
      PREZERO_MOE_W4_WK=0 run bench_moe_int4_wkfixed ${PZ_T_MOE_Q:-240} $P bench moe --quant int4 ${PZ_MOE_ARGS:-} \
        --json $W/moe_h200_int4_wkfixed.json --md $W/moe_h200_int4_wkfixed.md ;;
    quant_wk)  # issue 15: the W4A16 K split per work item, A/B: PZ_WK_LIST items dnN (--w4-wk-dn N) / upN (--w4-wk-up N)
      for a in ${PZ_WK_LIST:-dn1 dn2 dn8 up1}; do
        run bench_moe_int4_wk$a 120 $P bench moe --quant int4 ${PZ_WK_ARGS:---m 4,16,64,128} --w4-wk-${a:0:2} ${a:2} \
          --json $W/moe_h200_int4_wk$a.json --md $W/moe_h200_int4_wk$a.md
        grep -E "^\| [0-9]" $W/moe_h200_int4_wk$a.md | awk -F'|' -v a=$a '{print a, "tp", $2, "m", $3, "us", $6, $8}' | tee -a "$S"
      done ;;
    quant_ab)  # issue 15: bench moe --quant int4 per W4A16 K split; PZ_AB_LIST items like dn4, dn1:up1
      # tail0 / tail1: PREZERO_MOE_TAIL=0 / 1 (the last wave's items whole / split)
      # (dnN --w4-wk-dn N, upN --w4-wk-up N; kN --w4-kernel N, an option of tree b81288b only; PZ_WK_ARGS as in quant_wk)
      # nodirect: PREZERO_MOE_DIRECT=0, dyn: PREZERO_MOE_DYNAMIC=1 (items claimed from a counter), forkN: PREZERO_MOE_FORK=N, formerup: PREZERO_MOE_W4_UP_REGS=0, mlp0 / mlp1: PREZERO_MLP_GEMM=0 / 1 (the shared
      # expert fused / as GEMMs), gu0: PREZERO_MLP_ONE_GU=0 (gate and up as two GEMMs), waves0: PREZERO_MOE_W4_WAVES=0 (gate/up's split by the fill rule), builtin: an empty GEMM cache (the
      # built-in table, not the private cache that a tune section filled), refcache: the GEMM cache in $PZ_REF_CACHE
      # (e.g. a former built-in table saved as a cache file), base: the defaults (other tokens, e.g. r2, only name a repeat)
      for item in ${PZ_AB_LIST:-dn1 dn2 dn4}; do
        args="" envs=""
        for t in ${item//:/ }; do
          case $t in formerup) envs="$envs PREZERO_MOE_W4_UP_REGS=0" ;; k*) args="$args --w4-kernel ${t#k}" ;; dn*) args="$args --w4-wk-dn ${t#dn}" ;; up*) args="$args --w4-wk-up ${t#up}" ;;
            tail[01]) envs="$envs PREZERO_MOE_TAIL=${t#tail}" ;; nodirect) envs="$envs PREZERO_MOE_DIRECT=0" ;; dyn) envs="$envs PREZERO_MOE_DYNAMIC=1" ;; fork[012]) envs="$envs PREZERO_MOE_FORK=${t#fork}" ;; mlp0|mlp1) envs="$envs PREZERO_MLP_GEMM=${t#mlp}" ;; gu0) envs="$envs PREZERO_MLP_ONE_GU=0" ;; waves0) envs="$envs PREZERO_MOE_W4_WAVES=0" ;;
            builtin) mkdir -p $W/empty_cache; envs="$envs PREZERO_CACHE_DIR=$W/empty_cache" ;;
            refcache) envs="$envs PREZERO_CACHE_DIR=${PZ_REF_CACHE:?refcache needs PZ_REF_CACHE, a cache directory}" ;; esac
        done
        n=${item//:/_}
        run bench_moe_int4_ab_$n 120 env $envs $P bench moe --quant int4 ${PZ_WK_ARGS:---m 4,16,64,128} $args \
          --json $W/moe_h200_int4_ab_$n.json --md $W/moe_h200_int4_ab_$n.md
        grep -E "^\| [0-9]" $W/moe_h200_int4_ab_$n.md | awk -F'|' -v a=$n '{print a, "tp", $2, "m", $3, "us", $6, $8}' | tee -a "$S"
      done ;;
    ncu_attn)  # issue 18: ncu of the MLA split attention and combine kernels at small m (bench/attn/ncu_attn.sh;
      # PZ_NCU_M, default 4; PZ_NCU_TP, default 1): how much of m = 4's time the split partials and the combine take
      OUT=$W/ncu_attn PZ_NCU_M=${PZ_NCU_M:-4} run ncu_attn 200 bash bench/attn/ncu_attn.sh ;;
    ncu_src)  # issues 14 / 18: per-SASS-line warp stall samples of one launch each (bench/ncu_src.sh; PZ_NCU_SRC_CASES
      # overrides its cases: v4 attention TP 1 m 128 / 16, the wgmma GEMM on Kimi-K2 TP 1 o_proj / q_b at m 64)
      OUT=$OUT/ncu_src run ncu_src ${PZ_T_NCU_SRC:-400} bash bench/ncu_src.sh; cp $W/ncu_src.txt $OUT/ncu_src/details.txt ;;
    ncu_moe)  # issue 15: ncu of the W4A16 expert kernel (bench/moe/ncu_w4a16.sh; PZ_NCU_M, default 64)
      OUT=$W/ncu_moe PZ_NCU_M=${PZ_NCU_M:-64} run ncu_moe 200 bash bench/moe/ncu_w4a16.sh ;;
    route_ab)  # issue 15: bench moe --quant int4 with the former serial top-k (PREZERO_MOE_ROUTE_TOPK=0), the two stages with
               # the former comparison (compare: PREZERO_MOE_ROUTE_KEYS=0) and the default (keys; twostage is the same), in the
               # order of PZ_ROUTE_LIST (default "serial_1 twostage_1 serial_2 twostage_2"; PZ_ROUTE_ARGS, default TP 1/2,
               # m 1/4/16/64/128): each process allocates its own weights, so the pairs show the run-to-run spread
      for v in ${PZ_ROUTE_LIST:-serial_1 twostage_1 serial_2 twostage_2}; do
        e=""; case $v in serial*) e="PREZERO_MOE_ROUTE_TOPK=0" ;; compare*) e="PREZERO_MOE_ROUTE_KEYS=0" ;; esac
        run bench_moe_route_$v ${PZ_T_MOE:-200} env $e $P bench moe --quant int4 ${PZ_ROUTE_ARGS:---tp 1,2 --m 1,4,16,64,128} \
          --json $W/moe_h200_int4_route_$v.json --md $W/moe_h200_int4_route_$v.md
      done
      for v in ${PZ_ROUTE_LIST:-serial_1 twostage_1 serial_2 twostage_2}; do grep -E "^\| [0-9]" $W/moe_h200_int4_route_$v.md | \
        awk -F'|' -v a=$v '{print "moe", a, "tp", $2, "m", $3, "us", $6, $8, "bf16", $9}' | tee -a "$S"; done ;;
    fork_ab)  # issue 15: bench moe --quant int4 with the shared expert on the op's stream first (PREZERO_MOE_FORK=0), on a
              # second stream beside the router and gather joined before the routed experts (1) or only before the
              # combine (2), and unset (d, the default: 2 at m <= 4, 1 above), alternated 0 1 2 d 0 1 2 d in one call
              # (PZ_FORK_ARGS, default TP 1/2, m 1/4/16/64/128)
      for v in 0_1 1_1 2_1 d_1 0_2 1_2 2_2 d_2; do
        e="PREZERO_MOE_FORK=${v%_*}"; [ ${v%_*} = d ] && e=""
        run bench_moe_fork_$v ${PZ_T_MOE:-200} env $e $P bench moe --quant int4 \
          ${PZ_FORK_ARGS:---tp 1,2 --m 1,4,16,64,128} --json $W/moe_h200_int4_fork_$v.json --md $W/moe_h200_int4_fork_$v.md
      done
      for v in 0_1 1_1 2_1 d_1 0_2 1_2 2_2 d_2; do grep -E "^\| [0-9]" $W/moe_h200_int4_fork_$v.md | \
        awk -F'|' -v a=$v '{print "fork", a, "tp", $2, "m", $3, "us", $6, $8, "bf16", $9}' | tee -a "$S"; done ;;
    combine_ab)  # issue 18: bench attn --paged with the MLA combine's layouts: PREZERO_MLA_COMBINE=0 (f: one CTA per row and
                 # head), =1 (w: one warp per row, head and 128 columns) and unset (d: by split slots per row), alternated
                 # f w d f w d in one call (PZ_COMBINE_ARGS, default TP 1/2/4, m 4/16/64/128, context 8192)
      for v in f_1 w_1 d_1 f_2 w_2 d_2; do
        e=""; case $v in f_*) e="PREZERO_MLA_COMBINE=0" ;; w_*) e="PREZERO_MLA_COMBINE=1" ;; esac
        run bench_attn_comb_$v ${PZ_T_ATTN:-150} env $e $P bench attn --paged ${PZ_COMBINE_ARGS:---tp 1,2,4 --m 4,16,64,128} \
          --reps 7 --json $W/attn_comb_$v.json --md $W/attn_comb_$v.md
      done
      for v in f_1 w_1 d_1 f_2 w_2 d_2; do grep -E "^\| [0-9]" $W/attn_comb_$v.md | \
        awk -F'|' -v a=$v '{print "comb", a, "tp", $2, "m", $4, "attn_us", $8, $10}' | tee -a "$S"; done ;;
    proj_ab)  # bench attn --paged with the MLA absorb / W_UV on the exact f32 kernels (x: PREZERO_MLA_PROJ=0) and on
              # tensor cores (d: the default), alternated x d x d (PZ_PROJ_ARGS, default TP 1/2/4, m 4/16/64/128): the
              # op column holds them; then bench step (Kimi-K2, 3 layers, TP 1) x and d at PZ_PROJ_STEP (default 4,32,128)
      for v in x_1 d_1 x_2 d_2; do
        e=""; case $v in x_*) e="PREZERO_MLA_PROJ=0" ;; esac
        run bench_attn_proj_$v ${PZ_T_ATTN:-150} env $e $P bench attn --paged ${PZ_PROJ_ARGS:---tp 1,2,4 --m 4,16,64,128} \
          --reps 7 --json $W/attn_proj_$v.json --md $W/attn_proj_$v.md
        grep -E "^\| [0-9]" $W/attn_proj_$v.md | awk -F'|' -v a=$v '{print "proj", a, "tp", $2, "m", $4, "attn_us", $8, "op_us", $13}' | tee -a "$S"
      done
      for v in x d; do
        e=""; [ $v = x ] && e="PREZERO_MLA_PROJ=0"
        run bench_step_proj_$v ${PZ_T_STEP:-200} env $e $P bench step --tp 1 --batch ${PZ_PROJ_STEP:-4,32,128} \
          --json $W/step_proj_$v.json --md $W/step_proj_$v.md
        grep -E "^\| [0-9]" $W/step_proj_$v.md | sed "s/^/step_proj $v /" | tee -a "$S"
      done ;;
    ab_ref)  # the working tree against another commit in one call: make .deps/ref.tar here first (git archive -o
             # .deps/ref.tar <commit>); it is built into /tmp/pz_ref, then `prezero $PZ_AB_ARGS` runs with the reference's
             # binary and the tree's, alternated ref tree ref tree (PZ_AB_PAIRS pairs, default 2), each with
             # --json / --md ab_{ref,tree}_N.{json,md}; the md tables' rows go to the summary
      rm -rf /tmp/pz_ref && mkdir -p /tmp/pz_ref && tar -xf .deps/ref.tar -C /tmp/pz_ref && cp -r .deps /tmp/pz_ref/
      run build_ref ${PZ_T_BUILD:-300} bash -c "cd /tmp/pz_ref && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_PREFIX_PATH=$CJ/usr -DCMAKE_CUDA_ARCHITECTURES=90a && cmake --build build -j16 --target prezero_cli" \
        || { tail -20 "$W/build_ref.txt"; continue; }
      for i in $(seq 1 ${PZ_AB_PAIRS:-2}); do
        for v in ref tree; do
          b=$P; [ $v = ref ] && b=/tmp/pz_ref/build/prezero
          run ab_${v}_$i ${PZ_T_AB:-200} $b ${PZ_AB_ARGS:-bench moe --quant int4 --tp 1,2 --m 1,4} \
            --json $W/ab_${v}_$i.json --md $W/ab_${v}_$i.md
          grep -E "^\| [0-9]" $W/ab_${v}_$i.md | cut -c1-120 | sed "s/^/$v $i /" | tee -a "$S"
        done
      done ;;
    moe_times)  # issue 15: each kernel of the int4 MoE op, one by one under ncu (cold caches, serialised: the gaps between
                # kernels are not in it), TP PZ_NCU_TP (default 1) at PZ_NCU_M (default 4): where the op's time goes. The bf16 MoE runs first
                # in the bench (moe_route_kernel, moe_gather_kernel, moe_mm_kernel pair, moe_combine_kernel); the int4 op
                # is the shared expert's moe_mm_kernel pair (on its side stream), moe_route_kernel, gather_kernel, mm_kernel
                # pair, combine_kernel; from m 8 the shared expert is GEMMs + silu_mul_kernel (pz_cuda_mlp), also listed;
                # the summary shows the int4 ops from the first gather_kernel on
      run moe_times 300 ncu --clock-control none --metrics gpu__time_duration.sum --csv -c ${PZ_NCU_C:-200} \
        -k regex:'^(moe_route_kernel|gather_kernel|mm_kernel|moe_mm_kernel|combine_kernel|gemm_wgmma_kernel|gemm_wgmma_streamk_kernel|gemm_splitk_kernel|silu_mul_kernel)$' \
        $P bench moe --quant int4 --tp ${PZ_NCU_TP:-1} --m ${PZ_NCU_M:-4} --reps 1
      grep -E '"gpu__time_duration' "$W/moe_times.txt" | awk -F'","' '{print $5, $9, $NF}' | tr -d '"' > "$W/moe_times_short.txt"
      awk '/moeq::gather_kernel/ && !f {f=NR} {l[NR]=$0} END {for (i = f - 6; i < f + 30 && i <= NR; i++) if (i > 0) print l[i]}' \
        "$W/moe_times_short.txt" | tee -a "$S" ;;
    ncu_l2)  # issues 14 / 15 / 18: L2 and DRAM traffic by kind of the plain read and the decode kernels (bench/ncu_l2.sh)
      run build_read 120 cmake --build $B --target dev_stream_read || { tail -20 "$W/build_read.txt"; continue; }
      run ncu_l2 ${PZ_T_NCU_L2:-300} bash bench/ncu_l2.sh; cp $W/ncu_l2.txt $OUT/ncu_l2.txt ;;
    stream_pattern)  # issues 14 / 15: HBM read rate against concurrent streams and bytes per visit (bench/dev/stream_pattern.cu)
      # then ncu's speed-of-light of one plain streaming read (bench/dev/stream_read.cu, version 1): the L2 and DRAM
      # percentages a pure read reaches, to set the kernels' figures against
      run build_pattern 120 cmake --build $B --target dev_stream_pattern dev_stream_read || { tail -20 "$W/build_pattern.txt"; continue; }
      run stream_pattern ${PZ_T_PATTERN:-200} $B/dev_stream_pattern
      cp $W/stream_pattern.txt $OUT/stream_pattern.txt; cat $W/stream_pattern.txt | tee -a "$S"
      run ncu_read 120 ncu --clock-control none --section SpeedOfLight -k regex:stream_read -s 3 -c 1 $B/dev_stream_read 1 2048
      grep -E "Throughput|Duration|stream_read" $W/ncu_read.txt | sed 's/  */ /g' | tee -a "$S" ;;
    consumer) run consumer ${PZ_T_CONSUMER:-300} ctest --test-dir $B -R installed_consumer -V
      grep -E "CUDA part|all checks passed|FAIL" "$W/consumer.txt" | sed 's/^[0-9]*: //' | tee -a "$S" ;;
    attn_mixed)  # issue 18: contexts drawn from [1024, 16384], paged: the balanced split-KV schedule, then the former
                 # split (PREZERO_MLA_BALANCE=0) in the same call
      run bench_attn_mixed ${PZ_T_ATTN:-150} $P bench attn --tp 1,2,4 --m 16,64,128 --reps 7 --paged --ctx 16384 --ctx-min 1024 \
        --json $W/attn_mixed.json --md $W/attn_mixed.md
      PREZERO_MLA_BALANCE=0 run bench_attn_mixed_former ${PZ_T_ATTN:-150} $P bench attn --tp 1,2,4 --m 16,64,128 --reps 7 --paged \
        --ctx 16384 --ctx-min 1024 --json $W/attn_mixed_former.json --md $W/attn_mixed_former.md ;;
    attn_v4)  # issue 18: the ping-pong attention kernel (v4, the default above 16 heads) against v3 (PREZERO_MLA_ATTN=3)
              # in the same call, Kimi-K2 shapes TP 1/2/4/8, context 8192 paged, then mixed contexts [1024, 16384]
      run bench_attn_v4 ${PZ_T_ATTN:-150} $P bench attn ${PZ_ATTN4_ARGS:---tp 1,2,4,8 --m 4,16,64,128} --reps 7 --paged \
        --json $W/attn_v4.json --md $W/attn_v4.md
      PREZERO_MLA_ATTN=3 run bench_attn_v3 ${PZ_T_ATTN:-150} $P bench attn ${PZ_ATTN4_ARGS:---tp 1,2,4,8 --m 4,16,64,128} \
        --reps 7 --paged --json $W/attn_v3.json --md $W/attn_v3.md
      run bench_attn_v4_mixed ${PZ_T_ATTN:-150} $P bench attn --tp 1,2 --m 16,64,128 --reps 7 --paged --ctx 16384 \
        --ctx-min 1024 --json $W/attn_v4_mixed.json --md $W/attn_v4_mixed.md
      PREZERO_MLA_ATTN=3 run bench_attn_v3_mixed ${PZ_T_ATTN:-150} $P bench attn --tp 1,2 --m 16,64,128 --reps 7 --paged \
        --ctx 16384 --ctx-min 1024 --json $W/attn_v3_mixed.json --md $W/attn_v3_mixed.md
      for f in v4 v3 v4_mixed v3_mixed; do grep -E "^\| [0-9]" $W/attn_$f.md | awk -F'|' -v a=$f '{print a, "tp", $2, "m", $4, $5, "attn_us", $8, $10}' | tee -a "$S"; done ;;
    pdl)  # issue 14: programmatic dependent launch of the GEMMs (the default) against PREZERO_PDL=0 in one call: bench gemm on the
          # built-in table (PZ_PDL_ONLY, default Kimi-K2/tp1), bench step (PZ_PDL_STEP_ARGS), bench attn (the op's q_b / o_proj)
      for v in pdl nopdl; do
        e=""; [ $v = nopdl ] && e="PREZERO_PDL=0"
        run bench_gemm_$v ${PZ_T_GEMM:-300} env $e $P bench gemm --no-tune --only ${PZ_PDL_ONLY:-Kimi-K2/tp1} \
          --json $W/gemm_h200_$v.json --md $W/gemm_h200_$v.md
        run bench_step_$v ${PZ_T_STEP:-200} env $e $P bench step ${PZ_PDL_STEP_ARGS:-} \
          --json $W/step_h200_$v.json --md $W/step_h200_$v.md
        run bench_attn_$v ${PZ_T_ATTN:-150} env $e $P bench attn --tp 1,2 --m 4,16,64,128 --reps 7 --paged \
          --json $W/attn_h200_$v.json --md $W/attn_h200_$v.md
      done
      for v in pdl nopdl; do grep -E "^\| [0-9]" $W/attn_h200_$v.md | awk -F'|' -v a=$v '{print "attn", a, "tp", $2, "m", $4, "attn_us", $8, "op_us", $13}' | tee -a "$S"; done
      for v in pdl nopdl; do grep -E "^\| [A-Za-z]" $W/gemm_h200_$v.md | grep -v "^| model" | \
        awk -F'|' -v a=$v '{print a, $3, $4, "m", $7, "cublas", $10, "best", $16, $17, "heur", $22}' | tee -a "$S"; done
      for v in pdl nopdl; do grep -E "^\| [0-9]" $W/step_h200_$v.md | sed "s/^/step $v /" | tee -a "$S"; done ;;
    ks_ab)  # issue 14: k-blocks per TMA stage of the wgmma split-K kernel (PREZERO_GEMM_WG_KS=2 / 4: each W row arrives as 256 / 512
            # contiguous bytes per stage) against 1, bench gemm --no-tune on the built-in table, PZ_KS_ONLY rows
            # (default /tp1/): ks2, base, ks4, base again
      for v in ks2 base_1 ks4 base_2; do
        e="PREZERO_GEMM_WG_KS=1"; case $v in ks2) e="PREZERO_GEMM_WG_KS=2" ;; ks4) e="PREZERO_GEMM_WG_KS=4" ;; esac
        run bench_gemm_$v ${PZ_T_GEMM:-300} env $e $P bench gemm --no-tune --only ${PZ_KS_ONLY:-/tp1/} \
          --json $W/gemm_ks_$v.json --md $W/gemm_ks_$v.md
      done ;;
    ksrule_ab)  # issue 14: the default k-blocks per wgmma stage (2 where a split has 2 or 4 k-blocks) against PREZERO_GEMM_WG_KS=1, bench
                # gemm --no-tune on the built-in table, every row (PZ_KS_ONLY narrows), alternated twice
      for v in rule_1 ks1_1 rule_2 ks1_2; do
        e="-u PREZERO_GEMM_WG_KS"; case $v in ks1*) e="PREZERO_GEMM_WG_KS=1" ;; esac
        run bench_gemm_$v ${PZ_T_GEMM:-300} env $e $P bench gemm --no-tune ${PZ_KS_ONLY:+--only $PZ_KS_ONLY} \
          --json $W/gemm_ksrule_$v.json --md $W/gemm_ksrule_$v.md
      done ;;
    attn_lazy)  # issue 18: v4 with its lazy rescale (the default) against PREZERO_MLA_LAZY=0 in the same call, Kimi-K2
              # shapes (PZ_ATTN4_ARGS, default TP 1/2, m 4/16/64/128), context 8192 paged, then mixed contexts [1024, 16384]
      for v in lazy nolazy; do
        e=""; [ $v = nolazy ] && e="PREZERO_MLA_LAZY=0"
        run bench_attn_$v ${PZ_T_ATTN:-150} env $e $P bench attn ${PZ_ATTN4_ARGS:---tp 1,2 --m 4,16,64,128} --reps 7 --paged \
          --json $W/attn_v4_$v.json --md $W/attn_v4_$v.md
        run bench_attn_${v}_mixed ${PZ_T_ATTN:-150} env $e $P bench attn --tp 1,2 --m 16,64,128 --reps 7 --paged --ctx 16384 \
          --ctx-min 1024 --json $W/attn_v4_${v}_mixed.json --md $W/attn_v4_${v}_mixed.md
      done
      for f in lazy nolazy lazy_mixed nolazy_mixed; do grep -E "^\| [0-9]" $W/attn_v4_$f.md | awk -F'|' -v a=$f '{print a, "tp", $2, "m", $4, $5, "attn_us", $8, $10}' | tee -a "$S"; done ;;
    attn_v3)  # issue 18: the TMA + wgmma attention kernel (v3, default) and v2 (PREZERO_MLA_ATTN=2) in the same call,
              # Kimi-K2 shapes TP 1/2/4/8, context 8192 paged, then mixed contexts [1024, 16384]
      run bench_attn_v3 ${PZ_T_ATTN:-150} $P bench attn --tp 1,2,4,8 --m 4,16,64,128 --reps 7 --paged \
        --json $W/attn_v3.json --md $W/attn_v3.md
      PREZERO_MLA_ATTN=2 run bench_attn_v2 ${PZ_T_ATTN:-150} $P bench attn --tp 1,2,4,8 --m 4,16,64,128 --reps 7 --paged \
        --json $W/attn_v2.json --md $W/attn_v2.md
      run bench_attn_v3_mixed ${PZ_T_ATTN:-150} $P bench attn --tp 1,2,4 --m 16,64,128 --reps 7 --paged --ctx 16384 \
        --ctx-min 1024 --json $W/attn_v3_mixed.json --md $W/attn_v3_mixed.md
      PREZERO_MLA_ATTN=2 run bench_attn_v2_mixed ${PZ_T_ATTN:-150} $P bench attn --tp 1,2,4 --m 16,64,128 --reps 7 --paged \
        --ctx 16384 --ctx-min 1024 --json $W/attn_v2_mixed.json --md $W/attn_v2_mixed.md
      for f in attn_v3 attn_v2 attn_v3_mixed attn_v2_mixed; do echo "== $f"; cat "$W/$f.md" 2>/dev/null | grep "^|" | cut -c1-160; done ;;
    attn_waves)  # issue 18: the MLA split count by two waves of CTAs (the default) against one (PREZERO_MLA_WAVES=1),
                 # Kimi-K2 TP 1/2/4/8 paged at context 8192, then mixed contexts [1024, 16384], in the same call
      for wv in 2 1; do
        PREZERO_MLA_WAVES=$wv run bench_attn_waves$wv ${PZ_T_ATTN:-150} $P bench attn --tp 1,2,4,8 --m 4,16,64,128 --reps 7 \
          --paged --json $W/attn_v3_waves$wv.json --md $W/attn_v3_waves$wv.md
        PREZERO_MLA_WAVES=$wv run bench_attn_mixed_waves$wv ${PZ_T_ATTN:-150} $P bench attn --tp 1,2,4 --m 16,64,128 --reps 7 \
          --paged --ctx 16384 --ctx-min 1024 --json $W/attn_v3_mixed_waves$wv.json --md $W/attn_v3_mixed_waves$wv.md
      done
      for f in attn_v3_waves2 attn_v3_waves1 attn_v3_mixed_waves2 attn_v3_mixed_waves1; do
        echo "== $f"; grep "^| [1248] |" "$W/$f.md" 2>/dev/null | cut -c1-120; done ;;
    attn_splits)  # issue 18: mixed contexts at large m run one split (132 slots / m rows): the longest row sets the time.
                  # PREZERO_MLA_SPLITS=2 and 4 let the balanced schedule even the rows out; uniform contexts show the cost
      for sp in 2 4; do
        PREZERO_MLA_SPLITS=$sp run bench_attn_mixed_s$sp ${PZ_T_ATTN:-150} $P bench attn --tp 1,2 --m 64,128 --reps 7 --paged \
          --ctx 16384 --ctx-min 1024 --json $W/attn_mixed_splits$sp.json --md $W/attn_mixed_splits$sp.md
        PREZERO_MLA_SPLITS=$sp run bench_attn_uniform_s$sp ${PZ_T_ATTN:-150} $P bench attn --tp 1,2 --m 64,128 --reps 7 --paged \
          --json $W/attn_uniform_splits$sp.json --md $W/attn_uniform_splits$sp.md
      done
      for f in attn_mixed_splits2 attn_mixed_splits4 attn_uniform_splits2 attn_uniform_splits4; do
        echo "== $f"; grep "^| [12] |" "$W/$f.md" 2>/dev/null | cut -c1-120; done ;;
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
    sweep)  # every compute-sanitizer tool on every CUDA test; reports classified against tools/sanitizer-known.txt
      sweep_section ;;
    soak)  # prezero soak: mixed batch sizes, ON/OFF interleaved, deterministic; bit-identity, memory, no hang
      run soak ${PZ_T_SOAK:-300} $P soak ${PZ_SOAK_ARGS:-} --json $W/soak_h200.json --md $W/soak_h200.md
      grep -h "replays/s\|^- \|^Verdict" $W/soak_h200.md 2>/dev/null | cut -c1-220 | tee -a "$S" ;;
    soak_bg)  # `prezero soak` in a session of its own (setsid), which outlives this device call, for a soak longer
              # than one call allows; its files go to PZ_SOAK_DIR (default /tmp/pz_soak), soak_wait collects them
      SD=${PZ_SOAK_DIR:-/tmp/pz_soak}; rm -rf "$SD"; mkdir -p "$SD"
      setsid nohup bash -c "timeout ${PZ_T_SOAK:-900} $P soak ${PZ_SOAK_ARGS:-} --json $SD/soak_h200.json \
        --md $SD/soak_h200.md > $SD/soak.txt 2>&1; echo \$? > $SD/rc" > /dev/null 2>&1 < /dev/null &
      log "soak_bg: prezero soak ${PZ_SOAK_ARGS:-} started in $SD at $(date -u +%FT%TZ)" ;;
    soak_wait)  # waits (at most PZ_SOAK_WAIT s, default 560) for soak_bg's run, then copies its files into $W
      SD=${PZ_SOAK_DIR:-/tmp/pz_soak}; t0=$(date +%s)
      while [ -d "$SD" ] && [ ! -f "$SD/rc" ] && [ $(( $(date +%s) - t0 )) -lt ${PZ_SOAK_WAIT:-560} ]; do sleep 5; done
      if [ -f "$SD/rc" ]; then
        log "$(printf '%-28s rc=%-3s' soak_bg "$(cat $SD/rc)")"; cp "$SD"/soak* "$W"/
        grep -h "replays/s\|^- \|^Verdict" $W/soak_h200.md 2>/dev/null | cut -c1-220 | tee -a "$S"
      else log "soak_wait: no finished soak in $SD after $(( $(date +%s) - t0 )) s"; tail -3 "$SD/soak.txt" 2>/dev/null | tee -a "$S"; fi ;;
    compare_procs)  # prezero compare with one process per rank (--procs 2: two GPUs when present, else both on GPU 0)
      run compare_procs2 ${PZ_T_COMPARE:-300} $P compare --procs 2 --config ${PZ_PROCS_CONFIG:-tiny} --isl 64 --osl 8 \
        --conc 4 --rounds 1 --no-profile ${PZ_COMPARE_ARGS:-} --out $W/compare_procs2
      grep -h "layers fit\|^Verdict\|^| 4 " $W/compare_procs2/compare.md 2>/dev/null | cut -c1-200 | tee -a "$S" ;;
    build) ;;
    *) log "unknown section $s" ;;
  esac
  pack
done
tar -czf "$OUT/results.tar.gz" -C "$OUT" work
log "== done $(date -u +%FT%TZ)"
