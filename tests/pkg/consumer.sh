#!/usr/bin/env bash
# ctest installed_consumer: installs this build to a temporary prefix, configures and builds
# examples/ against it with find_package(prezero) (its own CMake project, nothing of this tree on
# its include path), runs the example's CPU part (and its CUDA part when built: 0 or 77 = no GPU),
# then checks `pkg-config --cflags --libs prezero` from that prefix by compiling and running a
# small program with exactly those flags (skipped when pkg-config is absent). The installed headers are
# compiled as C11, and as C++17 and C++20 where the C++ compiler takes those standards, with -Wall -Wextra
# -pedantic -Werror, and their initialiser macros checked.
# Usage: consumer.sh BUILD_DIR SOURCE_DIR CMAKE CC
set -euo pipefail
build=$1 src=$2 cmake=$3 cc=$4
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

echo "== cmake --install $build --prefix $prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; exit 1; }
for f in include/prezero.h include/prezero/gemm.h include/prezero/gate.h include/prezero/graph.h \
         include/prezero/common.h include/prezero_status.def lib/cmake/prezero/prezeroConfig.cmake \
         lib/pkgconfig/prezero.pc bin/prezero; do
  [ -e "$prefix/$f" ] || { echo "FAIL: $f not installed"; exit 1; }
done
ls "$prefix"/lib/libprezero.so* >/dev/null || { echo "FAIL: libprezero.so not installed"; exit 1; }

echo "== examples/ against the installed package"
"$cmake" -S "$src/examples" -B "$tmp/ex" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" >"$tmp/cfg.log" 2>&1 \
  || { cat "$tmp/cfg.log"; exit 1; }
"$cmake" --build "$tmp/ex" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
"$tmp/ex/pz_example_cpu" | tee "$tmp/cpu.out"
grep -q "^all checks passed$" "$tmp/cpu.out" || { echo "FAIL: the CPU part did not pass"; exit 1; }
if [ -x "$tmp/ex/pz_example_cuda" ]; then
  rc=0; "$tmp/ex/pz_example_cuda" || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 77 ] || { echo "FAIL: the CUDA part exited $rc"; exit 1; }
  echo "CUDA part: exit $rc$([ "$rc" = 77 ] && echo ' (no suitable GPU: skipped)')"
fi

echo "== the installed headers as C11, C++17 and C++20, -Wall -Wextra -pedantic -Werror"
cat >"$tmp/hdr.c" <<'C'
#include <prezero.h>
#include <prezero_options.h>
#include <stdio.h>
int main(void) {
  pz_engine_config c = PZ_ENGINE_CONFIG_INIT;
  pz_ar_comm_config a = PZ_AR_COMM_CONFIG_INIT;
  int ok = c.model == NULL && c.tp == 1 && c.max_batch == 4 && c.context == 128 && c.max_steps == 64 &&
           c.layers == 0 && c.seed == 1234 && c.prezero == -1 && c.device == PZ_DEVICE_CPU && c.threads == 0 &&
           c.model_dir == NULL && c.quant == PZ_QUANT_AUTO && c.options == NULL && c.id_file == NULL &&
           c.rank == 0 && c.timeout_ms == 0 && a.world == 1 && a.rank == 0 && a.device == 0 && a.max_m == 128 &&
           a.max_H == 8192 && a.timeout_ms == 10000;
  printf("initialisers: %s\n", ok ? "as documented" : "WRONG");
  return !ok;
}
C
"$cc" -std=c11 -Wall -Wextra -pedantic -Werror -I"$prefix/include" "$tmp/hdr.c" -o "$tmp/hdr_c"
"$tmp/hdr_c"
cxx=${CXX:-c++}
if command -v "$cxx" >/dev/null 2>&1; then
  cp "$tmp/hdr.c" "$tmp/hdr.cpp"
  for std in c++17 c++20; do
    if ! echo 'int main() { return 0; }' | "$cxx" -std=$std -x c++ -fsyntax-only - 2>/dev/null; then
      echo "$cxx does not take -std=$std: that check skipped"
      continue
    fi
    "$cxx" -std=$std -Wall -Wextra -pedantic -Werror -I"$prefix/include" "$tmp/hdr.cpp" -o "$tmp/hdr_cxx"
    "$tmp/hdr_cxx"
  done
else
  echo "no C++ compiler ($cxx): the C++ check skipped"
fi

echo "== pkg-config --cflags --libs prezero"
if ! command -v pkg-config >/dev/null 2>&1; then
  echo "pkg-config not installed: that check skipped (the rest passed)"
  exit 0
fi
flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs prezero)
echo "$flags"
cat >"$tmp/pc.c" <<'C'
#include <prezero.h>
#include <stdio.h>
#include <string.h>
int main(void) {
  pz_gate_device d;
  int is_free = -1;
  if (pz_gate_device_default(&d) != PZ_OK) return 1;
  /* 64 MiB of fill beside a batch-128 donor: far beyond the 0.2 us budget, never free. */
  if (pz_gate_is_free(&d, 128, 131072, PZ_ELEM_F32, 7168, 1, &is_free) != PZ_OK || is_free != 0) return 1;
  printf("pkg-config build: prezero %s, %s\n", PZ_VERSION, pz_status_string(PZ_OK));
  return strcmp(pz_status_string(PZ_OK), "ok") != 0;
}
C
# shellcheck disable=SC2086
"$cc" -std=c11 "$tmp/pc.c" -o "$tmp/pc" $flags
"$tmp/pc"
