#!/usr/bin/env bash
# Block-scaled FP8 on a Hopper GPU without network: builds the family's tested variants in parallel (and DeepGEMM's
# extension, where peers/deepgemm was carried), runs the GPU tests and the benchmark; logs to LOG_DIR.
#   bash python/gpu_fp8_block.sh [LOG_DIR (default $OUT/fp8block)] [bench_fp8_block.py arguments...]
# FP8BLOCK_BENCH_ONLY=1 skips the build and the tests (the variants built elsewhere, e.g. by the test suite's run).
# Needs the nvidia-cutlass wheel importable or carried in .whl/.
set -uo pipefail
logs=${1:-${OUT:-gpu_logs}/fp8block}
mkdir -p "$logs"
export PYTHONUNBUFFERED=1
if [ -z "${CUTLASS_EXT_CACHE:-}" ] && [ -d .build_cache ]; then  # the cache python/gpu_routine.sh builds into
  export CUTLASS_EXT_CACHE=$PWD/.build_cache
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ! python3 -c "import cutlass_library" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/fp8block_site .whl/nvidia_cutlass-*.whl || exit 1
  export PYTHONPATH="/tmp/fp8block_site:$PYTHONPATH"
fi
if [ -z "${CUDA_HOME:-}" ]; then  # DeepGEMM's build and JIT want the toolkit's root, not a wrapper's folder
  for candidate in /usr/local/cuda /usr/local/cuda-13.0; do
    if [ -x "$candidate/bin/nvcc" ]; then export CUDA_HOME=$candidate; break; fi
  done
fi
if [ ! -f peers/deepgemm/csrc/python_api.cpp ]; then
  echo "peers/deepgemm was not carried: DeepGEMM not built" > "$logs/deepgemm_build.log"
elif [ -f peers/deepgemm/deep_gemm/_C.so ]; then  # built elsewhere: its JIT still needs the headers in place
  python3 python/deepgemm_build.py --headers-only > "$logs/deepgemm_build.log" 2>&1
else
  { timeout "${FP8BLOCK_DEEPGEMM_BUILD_SECONDS:-240}" python3 python/deepgemm_build.py; echo "exit status $?"; } \
    > "$logs/deepgemm_build.log" 2>&1 &
fi
if [ "${FP8BLOCK_BENCH_ONLY:-0}" != 1 ]; then
  start=$(date +%s)
  python3 - > "$logs/build.log" 2>&1 <<'PY'
from cutlass_ext.build import build_libraries
from cutlass_ext.fp8_block import Fp8BlockConfig
from python.bench_fp8_block import DENSE_VARIANTS as BENCH_DENSE, GROUPED_VARIANTS as BENCH_GROUPED
from tests.gpu.test_fp8_block import DENSE_VARIANTS, SWEPT_VARIANTS
from tests.gpu.test_grouped_fp8 import GROUPED_VARIANTS

bench = [Fp8BlockConfig.from_name(name) for name in BENCH_DENSE + BENCH_GROUPED]
# one parallel build for the tests (the swept space's variants among them) and the benchmark
configs = list(dict.fromkeys(DENSE_VARIANTS + SWEPT_VARIANTS + GROUPED_VARIANTS + bench))
for result in build_libraries([(c,) for c in configs], "90a"):
    print(result.configs[0].name, "built" if result.library else "FAILED", f"{result.seconds:.0f} s")
    if result.error:
        print(result.error)
PY
  echo "build: $(( $(date +%s) - start )) s, $(grep -c built "$logs/build.log") built," \
    "$(grep -c FAILED "$logs/build.log") failed"
  timeout 240 python3 -m pytest -q -rf tests/gpu/test_fp8_block.py tests/gpu/test_grouped_fp8.py > "$logs/tests.log" 2>&1
  echo "tests: $(tail -1 "$logs/tests.log")"
fi
timeout "${FP8BLOCK_BENCH_SECONDS:-300}" python3 python/bench_fp8_block.py \
  --out "$logs/fp8_block.csv" "${@:2}" > "$logs/bench.log" 2>&1
echo "bench: $(tail -1 "$logs/bench.log")"
if [ -f "$logs/fp8_block.csv" ] && [ ! -f "$logs/fp8_block.png" ]; then  # a run cut short: its rows so far
  python3 python/bench_fp8_block.py --plot-only --out "$logs/fp8_block.csv"
fi
wait
echo "DeepGEMM build: $(tail -1 "$logs/deepgemm_build.log" 2>/dev/null)"
if [ -f peers/deepgemm/deep_gemm/_C.so ]; then  # DeepGEMM beside ours at a few shapes (its JIT compiles each)
  PYTHONPATH="$PWD/peers/deepgemm:$PYTHONPATH" timeout "${FP8BLOCK_DEEPGEMM_SECONDS:-200}" \
    python3 python/bench_fp8_block.py --deepgemm \
    --out "$logs/fp8_block_deepgemm.csv" --dense-m 128,4096 --dense-nk 7168x2048 --moe-groups 8 --moe-m 128 \
    --moe-nk 4096x7168 --variants --grouped-variants > "$logs/bench_deepgemm.log" 2>&1
  echo "bench with DeepGEMM: $(tail -1 "$logs/bench_deepgemm.log")"
fi
