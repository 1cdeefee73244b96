#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, -fsanitize=fuzzer,address,undefined) in
# build-fuzz (CPU only) and runs each for SECONDS (default 15) on a scratch copy of its seed corpus
# (libFuzzer writes new inputs into its corpus folder), after replaying every committed regression
# input under tests/fuzz/regressions/<target>/. Exits non-zero on the first finding; libFuzzer
# leaves the crashing input in build-fuzz/findings/<target>/ (commit it under
# tests/fuzz/regressions/<target>/ with its fix).
#   tools/fuzz.sh [SECONDS]            all five targets (CI: 15 s each, about 75 s in all)
#   PZ_FUZZ_TARGETS="fuzz_config" tools/fuzz.sh 600   one target, longer
#   PZ_FUZZ_BUILD=build-fz tools/fuzz.sh               another build folder (default build-fuzz)
# Needs clang (tools/install-deps.sh --fuzz installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-15}
targets=${PZ_FUZZ_TARGETS:-"fuzz_config fuzz_safetensors fuzz_prompt_ids fuzz_tuner_table fuzz_index"}
command -v clang >/dev/null 2>&1 || { echo "fuzz.sh: clang not found; run tools/install-deps.sh --fuzz" >&2; exit 1; }
B=${PZ_FUZZ_BUILD:-build-fuzz}
CC=clang cmake -S . -B $B -DPZ_WITH_CUDA=OFF -DPZ_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" >/dev/null
# shellcheck disable=SC2086
cmake --build $B -j"${PZ_FUZZ_JOBS:-2}" --target $targets >/dev/null
# The same seeds (and the regression inputs) run as ctest cases in every build: tests/fuzz/replay.cmake.
seeds() { # seeds TARGET DIR: copies the target's seed corpus into DIR
  case $1 in
    fuzz_config) cp configs/*.json tests/fuzz/seeds/fuzz_config/*.json "$2"/
      for f in tests/data/golden/*/config.json; do [ -f "$f" ] && cp "$f" "$2/$(basename "$(dirname "$f")").json"; done ;;
    fuzz_safetensors) for f in tests/data/golden/*/model*.safetensors; do [ -f "$f" ] && cp "$f" "$2/$(basename "$(dirname "$f")")_$(basename "$f")"; done
      cp tests/data/int4/*.safetensors "$2"/ ;;
    fuzz_prompt_ids) cp tests/fuzz/seeds/fuzz_prompt_ids/* "$2"/ ;;
    fuzz_tuner_table) cp src/backend/tables/*.json "$2"/ ;;
    fuzz_index) cp tests/fuzz/seeds/fuzz_index/* "$2"/
      for f in tests/data/golden/*/model.safetensors.index.json; do [ -f "$f" ] && cp "$f" "$2/$(basename "$(dirname "$f")").index.json"; done ;;
  esac
}
for t in $targets; do
  bin=$B/tests/fuzz/$t
  reg=tests/fuzz/regressions/$t
  if [ -d "$reg" ] && [ -n "$(ls -A "$reg" 2>/dev/null)" ]; then
    echo "== $t: replaying $(ls "$reg" | wc -l) regression inputs"
    "$bin" "$reg"/* >/dev/null 2>&1 || { echo "fuzz.sh: $t fails on a committed regression input (run $bin $reg/* to see it)" >&2; exit 1; }
  fi
  corpus=$(mktemp -d); seeds "$t" "$corpus"
  mkdir -p "$B/findings/$t"
  echo "== $t: $secs s on $(ls "$corpus" | wc -l) seeds"
  "$bin" -max_total_time="$secs" -max_len=65536 -artifact_prefix="$B/findings/$t/" -print_final_stats=1 "$corpus" \
    > "$B/findings/$t.log" 2>&1 || { tail -30 "$B/findings/$t.log"; echo "fuzz.sh: $t found an input that fails: $(ls "$B/findings/$t")" >&2; rm -rf "$corpus"; exit 1; }
  grep -E "stat::number_of_executed_units" "$B/findings/$t.log" | sed "s/^/   /"
  rm -rf "$corpus"
done
echo "fuzz.sh: no findings ($secs s per target)"
