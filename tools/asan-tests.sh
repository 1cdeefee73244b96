#!/usr/bin/env bash
# The CPU test suite under AddressSanitizer + UndefinedBehaviorSanitizer: a CPU-only build in
# build-asan (gcc or clang, -fsanitize=address,undefined, any UB report aborts the test), then ctest.
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
ctest --test-dir build-asan --output-on-failure -j"$j" -E installed_consumer
