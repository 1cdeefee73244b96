#!/usr/bin/env bash
# Installs what building prezero needs, when it is missing (Debian/Ubuntu, apt-get), and does
# nothing when everything is there (so it needs no root on a machine already set up).
#   tools/install-deps.sh          cmake, gcc, make, cJSON (libcjson-dev): the build
#   tools/install-deps.sh --test   also pkg-config and gnuplot-nox, which two tests use
#   tools/install-deps.sh --fuzz   also clang, for the libFuzzer targets (tools/fuzz.sh)
# As root it runs apt-get itself, otherwise through sudo; without either it prints the one
# command to run and exits 1. nvcc (the CUDA backend) is never installed here: with the CUDA
# toolkit present the build picks it up, without it the CPU backend alone is built.
set -euo pipefail
want_test=0
want_fuzz=0
for a in "$@"; do
  case "$a" in
    --test) want_test=1 ;;
    --fuzz) want_fuzz=1 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "install-deps.sh: unknown argument '$a'; use --test, --fuzz or nothing" >&2; exit 2 ;;
  esac
done

pkgs=()
cmake_ok() { # cmake >= 3.22
  command -v cmake >/dev/null 2>&1 || return 1
  local v; v=$(cmake --version | sed -n 's/^cmake version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
  set -- $v
  [ "${1:-0}" -gt 3 ] || { [ "${1:-0}" = 3 ] && [ "${2:-0}" -ge 22 ]; }
}
cmake_ok || pkgs+=(cmake)
command -v gcc >/dev/null 2>&1 || command -v cc >/dev/null 2>&1 || pkgs+=(gcc)
command -v make >/dev/null 2>&1 || pkgs+=(make)
[ -f /usr/include/cjson/cJSON.h ] || [ -f /usr/local/include/cjson/cJSON.h ] || pkgs+=(libcjson-dev)
if [ "$want_test" = 1 ]; then
  command -v pkg-config >/dev/null 2>&1 || pkgs+=(pkg-config)  # installed_consumer: prezero.pc
  command -v gnuplot >/dev/null 2>&1 || pkgs+=(gnuplot-nox)    # test_compare renders the plots
fi
[ "$want_fuzz" = 1 ] && { command -v clang >/dev/null 2>&1 || pkgs+=(clang); }
[ "${#pkgs[@]}" = 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps.sh: missing ${pkgs[*]} and no apt-get here; install them with your package manager (cJSON: the cjson development package)" >&2
  exit 1
fi
if [ "$(id -u)" = 0 ]; then SUDO=""
elif command -v sudo >/dev/null 2>&1; then SUDO="sudo"
else
  echo "install-deps.sh: missing ${pkgs[*]}; run as root: apt-get update && apt-get install -y ${pkgs[*]}" >&2
  exit 1
fi
echo "install-deps.sh: installing ${pkgs[*]}"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${pkgs[@]}"
