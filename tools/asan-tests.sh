#!/usr/bin/env bash
# The CPU test suite under AddressSanitizer + UndefinedBehaviorSanitizer: a CPU-only build in
# build-asan (gcc or clang, -fsanitize=address,undefined, any UB report aborts the test), then ctest,
# the replay of the fuzz regression inputs (test_fuzz_replay_*) included.
# installed_consumer is left out: it links the sanitised library into an unsanitised example
# program, which ASan refuses by design (it runs in the normal build).
#   tools/asan-tests.sh [JOBS]     (CI: .ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."
j=${1:-4}
cmake -S . -B build-asan -DPZ_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build build-asan -j"$j" >/dev/null
# The fuzz regression inputs and seed corpora must be among them (tests/fuzz/replay.cmake, one per target).
n=$(ctest --test-dir build-asan -N -R '^test_fuzz_replay_' | grep -c 'Test *#') || true
[ "$n" -eq 5 ] || { echo "asan-tests.sh: $n test_fuzz_replay_* tests registered, want 5; see tests/fuzz/replay.cmake" >&2; exit 1; }
ctest --test-dir build-asan --output-on-failure -j"$j" -E installed_consumer
