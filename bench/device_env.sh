# Shared set-up of the bench/*/device.sh scripts, sourced from the repository root:
#   . bench/device_env.sh
# cJSON: when the system has no /usr/include/cjson/cJSON.h, unpacks the carried .deps/*.deb into
# $CJ (/tmp/cj) and puts its library folder on LD_LIBRARY_PATH and its prefix on CMAKE_PREFIX_PATH. Sets the compile/link flags the
# scripts share:
#   PZ_INC       -I flags: the repo root (bench/dev/...), include, src, tools, tests, cJSON, CUDA
#   PZ_CJSON_LIB -L/-l flags of cJSON
#   PZ_CUDA_LIB  -L flag of the CUDA libraries (add -lcudart, -lcublas, ... as needed)
#   PZ_NVARCH    nvcc code generation for the H200 (sm_90a)
# pz_add_nccl_path: puts the NCCL library of the Python wheel (nvidia-nccl-cu12), when installed,
# on LD_LIBRARY_PATH and sets NCCL_DIR (empty when absent).
export CJ=/tmp/cj
if [ ! -f /usr/include/cjson/cJSON.h ]; then
  mkdir -p $CJ
  for f in .deps/*.deb; do dpkg -x "$f" $CJ; done
fi
export LD_LIBRARY_PATH=$CJ/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
# find_package(prezero) in the installed-package test looks for cJSON through this path too.
export CMAKE_PREFIX_PATH=$CJ/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
PZ_INC="-I . -I include -I src -I tools -I tests -I $CJ/usr/include -I /usr/local/cuda/include"
PZ_CJSON_LIB="-L$CJ/usr/lib/x86_64-linux-gnu -lcjson"
PZ_CUDA_LIB="-L/usr/local/cuda/lib64"
PZ_NVARCH="-gencode=arch=compute_90a,code=sm_90a"

pz_add_nccl_path() {
  NCCL_DIR=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  [ -n "$NCCL_DIR" ] && export LD_LIBRARY_PATH=$NCCL_DIR:$LD_LIBRARY_PATH
  return 0
}
