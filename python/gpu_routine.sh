#!/usr/bin/env bash
# On a GPU machine without network: install from a folder of wheels, time a cold and a warm first call,
# run the GPU test suite, compute-sanitizer over every shipped kernel and the smoke benchmark; logs go to LOG_DIR.
#   bash python/gpu_routine.sh [WHEEL_DIR (default .whl)] [LOG_DIR (default $OUT or gpu_logs)]
set -uo pipefail
wheels=${1:-.whl}
logs=${2:-${OUT:-gpu_logs}}
mkdir -p "$logs"
export PYTHONUNBUFFERED=1
export CUTLASS_EXT_CACHE=${CUTLASS_EXT_CACHE:-$PWD/.build_cache}
site=/tmp/cutlass_ext_site
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$wheels"/*.whl || exit 1
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$logs/install.log" 2>&1 || { cat "$logs/install.log"; exit 1; }
{ nvidia-smi; nvcc --version; python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name())"; } > "$logs/environment.txt" 2>&1

first_call='import time, torch, cutlass_ext as ext
a = torch.randn(256, 256, device="cuda"); start = time.perf_counter(); ext.gemm(a, a); torch.cuda.synchronize()
print(f"first ext.gemm call in this process: {time.perf_counter() - start:.2f} s")'
echo "== process 1 (cache as carried: kernels prebuilt elsewhere, binding not yet built here)" | tee "$logs/cache.log"
python3 -c "$first_call" 2>&1 | grep -v '^W' | tee -a "$logs/cache.log"
echo "== process 2 (warm cache)" | tee -a "$logs/cache.log"
python3 -c "$first_call" 2>&1 | grep -v '^W' | tee -a "$logs/cache.log"

CUTLASS_EXT_ACCURACY_CSV="$logs/accuracy.csv" python3 -m pytest -m gpu -q -rf --hypothesis-profile=gpu \
  --hypothesis-show-statistics tests 2>&1 | tee "$logs/pytest_gpu.log"
tests_status=${PIPESTATUS[0]}
python3 python/sanitize_kernels.py --out "$logs/sanitize" 2>&1 | tee "$logs/sanitize.log"
sanitize_status=${PIPESTATUS[0]}
python3 python/bench_gemm.py --out "$logs/bench.csv" "${@:3}" 2>&1 | tee "$logs/bench.log"
bench_status=${PIPESTATUS[0]}
echo "gpu tests exit $tests_status, sanitizers exit $sanitize_status, benchmark exit $bench_status"
exit $(( tests_status || sanitize_status || bench_status ))
