#!/usr/bin/env bash
# On the GPU host, from the repository root: builds the foxhunt Python module with the host's
# python3 against a folder made by scripts/python-package.sh (no CAF, spdlog, toml++ or network
# needed: toml++ is bundled in it), then runs the Python tests (python/tests/gpu, python/tests/cpu)
# with pytest and the Python-vs-C++ market bench. Logs and the summary go to $FOXHUNT_LOGS
# (default ./gpu-logs/python).
#   usage: scripts/python-gpu-host.sh <dist-py folder> [pytest args...]
#   PYTHON (default python3: the one with torch), FOXHUNT_PY_BENCH=0 skips the bench,
#   CUDA_HOME (default /usr/local/cuda), FOXHUNT_BIN (the foxhunt program of a scripts/package.sh
#   folder, for foxhunt.evaluate's test; default ./dist/bin/foxhunt when present, else that test skips).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dist=$(cd "${1:?usage: python-gpu-host.sh <dist-py folder> [pytest args...]}" && pwd)
shift
py=${PYTHON:-python3}
out=${FOXHUNT_LOGS:-$PWD/gpu-logs}/python
build=${FOXHUNT_PY_BUILD:-$root/build-py}
cuda=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$out"
export PATH="$cuda/bin:$PATH"

generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
pybind11_dir=$("$py" -m pybind11 --cmakedir) || { echo "pybind11 not found for $py" | tee "$out/summary.txt"; exit 1; }
{
  cmake -S "$root/python" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -Dfoxhunt_DIR="$dist/lib/cmake/foxhunt" -Dpybind11_DIR="$pybind11_dir" \
    -DPython_EXECUTABLE="$(command -v "$py")" -DCUDAToolkit_ROOT="$cuda" &&
    cmake --build "$build" -j "$(nproc)"
} >"$out/build.txt" 2>&1
build_rc=$?
if [ $build_rc -ne 0 ]; then
  tail -40 "$out/build.txt"
  echo "python-build: FAILED (rc $build_rc, $out/build.txt)" | tee "$out/summary.txt"
  exit 1
fi

export PYTHONPATH="$build${PYTHONPATH:+:$PYTHONPATH}"
export FOXHUNT_SOURCE_DIR="$root"
# No LD_LIBRARY_PATH: the module's RUNPATH names dist-py/lib and the toolkit's libraries, and torch
# keeps loading its own CUDA libraries.
export NCCL_NVLS_ENABLE=0
if [ -z "${FOXHUNT_BIN:-}" ] && [ -x "$PWD/dist/bin/foxhunt" ]; then export FOXHUNT_BIN="$PWD/dist/bin/foxhunt"; fi
"$py" -m pytest -q -rs "$root/python/tests/gpu" "$root/python/tests/cpu" "$@" >"$out/pytest.txt" 2>&1
test_rc=$?
bench_rc=skipped
if [ "${FOXHUNT_PY_BENCH:-1}" != 0 ]; then
  CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} timeout 300 "$py" "$root/bench/python_market.py" \
    "$root/configs/markets/bench_ou.toml" >"$out/bench.txt" 2>&1
  bench_rc=$?
fi
{
  echo "python-build: ok ($build)"
  echo "python-tests: rc $test_rc: $(tail -1 "$out/pytest.txt")"
  grep -h -E '^(SKIPPED|FAILED|ERROR)' "$out/pytest.txt" | head -20
  echo "python-bench: rc $bench_rc"
  grep -h -E '^(RESULT|TARGET)' "$out/bench.txt" 2>/dev/null
} | tee "$out/summary.txt"
[ $test_rc -eq 0 ]
