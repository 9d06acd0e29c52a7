#!/bin/bash
# The opencl backend on a machine with a vendor GPU driver but no ICD registration (a container
# with NVIDIA's driver mounted, such as the device tool's machines): register the driver, build
# edgesdk, run the opencl tests and tools/bench_opencl.py. Logs go to $OUT (default ./gpu-check).
#
#   bash tools/opencl_gpu_check.sh [tests] [bench]      # both when no argument is given
#
# WHEELS=dir installs the wheels there first (pyopencl and what it needs, for a machine without an
# index); OPENCL_LIB names the driver library (default: the first libnvidia-opencl.so.1 found).
set -u
OUT=${OUT:-$PWD/gpu-check}; mkdir -p "$OUT"
steps=${*:-tests bench}
if [ -n "${WHEELS:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl || exit 3
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
lib=${OPENCL_LIB:-$(ldconfig -p | awk '/libnvidia-opencl.so.1/{print $NF; exit}')}
[ -n "$lib" ] || { echo "no OpenCL driver library found; set OPENCL_LIB" >&2; exit 2; }
mkdir -p /tmp/edgesdk-icd && echo "$lib" > /tmp/edgesdk-icd/gpu.icd
export OCL_ICD_VENDORS=/tmp/edgesdk-icd PYTHONUNBUFFERED=1
python3 -c "import edgesdk._native" 2>/dev/null || \
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) python3 -m pip install -q --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || \
  { echo "build failed: $OUT/build.log" >&2; exit 1; }
python3 -m edgesdk.cli devices
rc=0
if [[ " $steps " == *" tests "* ]]; then
  python3 -m pytest -n "$(nproc)" -q -p no:cacheprovider --timeout 120 -rfEs tests/ops tests/test_opencl_*.py \
    tests/test_cl_kernels_ops.py tests/test_concurrency.py tests/test_nan_inf.py tests/test_graph_cut_and_fp16.py \
    tests/test_session_api.py tests/test_profile.py tests/test_report.py tests/test_sizes.py \
    tests/test_package_crafted.py tests/test_quant.py -k "opencl or cl_kernels" > "$OUT/tests.log" 2>&1 || rc=1
  grep -E "^(FAILED|ERROR|SKIPPED)|passed|failed" "$OUT/tests.log" | tail -25
fi
if [[ " $steps " == *" bench "* ]]; then
  python3 tools/bench_opencl.py --rounds 3 --min-time 3 --json > "$OUT/bench.log" 2>&1 || rc=1
  grep -v '^\s\|^[{}]' "$OUT/bench.log"
fi
exit $rc
