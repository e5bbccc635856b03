#!/usr/bin/env bash
# Runs on the GPU host over a packaged folder (scripts/package.sh): the benchmarks first, alone on
# GPU 0; then, side by side, the GPU suite, each learning test, the CPU suite, and
# compute-sanitizer memcheck and racecheck over the GPU suite in gtest shards. With a second GPU
# the sanitizers and the learning tests run there from the start, beside the benchmarks. Logs go to $FOXHUNT_LOGS
# (default ./gpu-logs; tar it to bring it back whole); the summary is last.
#   usage: scripts/gpu-host.sh <dist folder> [gtest filter] [sanitizer tools...]
#   FOXHUNT_BENCHES="rows replay" picks benchmarks (default all; "none" skips them),
#   FOXHUNT_BENCH_TIMEOUT (120 s each), FOXHUNT_SANITIZER_TIMEOUT (420 s per process; also the
#   default of FOXHUNT_SUITE_TIMEOUT and FOXHUNT_LEARNING_TIMEOUT), FOXHUNT_SANITIZER_SHARDS (6),
#   FOXHUNT_SANITIZER_GPUS ("0 1": shards round-robin over those GPUs), FOXHUNT_LEARNING (a gtest
#   filter: which learning tests run).
set -uo pipefail
dist=$(cd "${1:?usage: gpu-host.sh <dist> [filter] [tools...]}" && pwd)
filter=${2:-*}
shift $(( $# >= 2 ? 2 : 1 ))
tools=("$@"); [ ${#tools[@]} -gt 0 ] || tools=(memcheck racecheck)
out=${FOXHUNT_LOGS:-$PWD/gpu-logs}
limit=${FOXHUNT_SANITIZER_TIMEOUT:-420}
suite_limit=${FOXHUNT_SUITE_TIMEOUT:-$limit}
learning_limit=${FOXHUNT_LEARNING_TIMEOUT:-$limit}
shards=${FOXHUNT_SANITIZER_SHARDS:-6}
mkdir -p "$out"
export LD_LIBRARY_PATH="$dist/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
sanitizer_gpu=$(( gpus >= 2 ? 1 : 0 ))
# FOXHUNT_SANITIZER_GPUS="0 1" spreads the shards round-robin over those GPUs (default: the sanitizer GPU).
read -r -a sanitizer_gpus <<<"${FOXHUNT_SANITIZER_GPUS:-$sanitizer_gpu}"

"$dist/bin/foxhunt" devices | tee "$out/devices.txt"

# Not under the sanitizers: two graph tests provoke CUDA API errors on purpose (a sync inside a
# capture must throw), which the sanitizer counts; so do ActorFault.* (an invalid launch
# configuration, and a null-pointer write that kills the CUDA context of a child process); the
# ActorKill.* and GpuAgentsKill.* runs are the end-to-end runs' kernels and shutdown path plus an
# actor exit, twice over (the kill and the resume), too long for a shard; LearnerWatchdogDevice.*
# times a stall against a spin kernel with 0.5 s margins, which instrumentation would swamp; the
# learning suites train for minutes and
# would take hours under instrumentation (their kernels are the ones the other tests exercise).
# Every suite whose name ends in Learning or LearningTest is a learning suite.
learning="*Learning.*:*LearningTest.*:PpoRun.Shipped*:ActorTraining.*:ActorMarket.*:ActorResume.*:ShippedConfigs.*"
learning_run=${FOXHUNT_LEARNING:-$learning}  # which of them run (a gtest filter)
provoked="GraphTest.CheckedSyncInsideCaptureThrowsAndStreamStaysUsable:GraphTest.UncheckedSyncInvalidatesCaptureAndThrows:ActorFault.*:ActorKill.*:GpuAgentsKill.*:LearnerWatchdogDevice.*"
sanitizer_filter="$filter-$provoked:$learning"
# Tests that take minutes under instrumentation (the end-to-end actor runs, short trainings): each
# gets its own sanitizer process per tool, so a shard never waits behind them. ActorEndToEnd.*
# is the sanitizer-sized run of the real DQN pipeline (one per completion mode); GpuAgents.*,
# *DqnFinetuneRun.*, PpoActorsFeatures.*, LocalRanks.* and PlacementSplit.* are whole runs through
# the actor runtime (several agents, fine-tuned extractors, PPO with features, ranks, placements).
solo=${FOXHUNT_SANITIZER_SOLO:-ActorEndToEnd.*:GpuPipelineTest.*:DqnTrainerTest.LearnsContextualBandit:DqnLearnerTest.EveryVariantFitsFixedTargets:DqnLearnerTest.GraphReplayEqualsEagerBitwise:LayerNormTest.BackwardMatchesFiniteDifferences:GpuAgents.*:*DqnFinetuneRun.*:PpoActorsFeatures.*:LocalRanks.*:PlacementSplit.*}
learning_gpu=${FOXHUNT_LEARNING_GPU:-$sanitizer_gpu}  # 0: after the benchmarks, beside the suite

# One sanitizer run over the whole suite takes longer than a device call allows: gtest shards,
# side by side, at the lowest CPU priority (the benchmarks' host threads must not wait behind them).
run_sanitizers() {
  local k=0
  local solos
  solos=$("$dist/bin/foxhunt_gpu_tests" --gtest_list_tests --gtest_filter="$solo" | awk '/^[^ ]/{s=$1} /^  /{print s $1}')
  for tool in "${tools[@]}"; do
    for t in $solos; do
      CUDA_VISIBLE_DEVICES=${sanitizer_gpus[$((k++ % ${#sanitizer_gpus[@]}))]} nice -n 19 timeout "$limit" \
        "$sanitizer" --tool "$tool" --error-exitcode 99 --print-limit 20 "$dist/bin/foxhunt_gpu_tests" \
        --gtest_filter="$t" >"$out/sanitizer_${tool}_${t//[^A-Za-z0-9]/_}.txt" 2>&1 &
    done
    for ((i = 0; i < shards; ++i)); do
      CUDA_VISIBLE_DEVICES=${sanitizer_gpus[$((k++ % ${#sanitizer_gpus[@]}))]} GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i nice -n 19 timeout "$limit" \
        "$sanitizer" --tool "$tool" --error-exitcode 99 --print-limit 20 "$dist/bin/foxhunt_gpu_tests" \
        --gtest_filter="$sanitizer_filter:$solo" >"$out/sanitizer_${tool}_$i.txt" 2>&1 &
    done
  done
}
# Each learning test in its own process: a slow or stuck one cannot cost the summary of the rest.
run_learning() {
  for t in $("$dist/bin/foxhunt_gpu_tests" --gtest_list_tests --gtest_filter="$learning_run" | awk '/^[^ ]/{s=$1} /^  /{print s $1}'); do
    CUDA_VISIBLE_DEVICES=$learning_gpu timeout "$learning_limit" "$dist/bin/foxhunt_gpu_tests" --gtest_filter="$t" \
      >"$out/gpu_learning_${t//[^A-Za-z0-9]/_}.txt" 2>&1 &
  done
}
if [ "$sanitizer_gpu" = 1 ]; then run_sanitizers; fi
if [ "$learning_gpu" != 0 ]; then run_learning; fi

# Benchmarks alone on GPU 0: nothing else may share it while they time.
for b in "$dist"/bin/foxhunt_bench_*; do
  [ -x "$b" ] || continue
  name=$(basename "$b"); name=${name#foxhunt_bench_}
  [ -n "${FOXHUNT_BENCHES:-}" ] && [[ " $FOXHUNT_BENCHES " != *" $name "* ]] && continue
  t0=$SECONDS
  CUDA_VISIBLE_DEVICES=0 timeout "${FOXHUNT_BENCH_TIMEOUT:-120}" "$b" >"$out/$(basename "$b").txt" 2>&1
  echo "$(basename "$b") rc=$? $((SECONDS - t0))s" >>"$out/bench_rc.txt"
done

CUDA_VISIBLE_DEVICES=0 timeout "$suite_limit" "$dist/bin/foxhunt_gpu_tests" --gtest_brief=1 --gtest_filter="$filter-$learning" \
  >"$out/gpu_tests.txt" 2>&1 &
timeout "$limit" "$dist/bin/foxhunt_cpu_tests" --gtest_brief=1 >"$out/cpu_tests.txt" 2>&1 &
if [ "$sanitizer_gpu" = 0 ]; then run_sanitizers; fi
if [ "$learning_gpu" = 0 ]; then run_learning; fi
wait

verdict() { grep -E '^\[  (PASSED  |FAILED  |SKIPPED )\]|^\[==========\]|ERROR SUMMARY|RACECHECK SUMMARY' "$1" | tail -4 | tr '\n' ' '; }
{
  cat "$out/bench_rc.txt" 2>/dev/null
  grep -h -E 'TARGET|BEST ' "$out"/foxhunt_bench_*.txt 2>/dev/null
  echo "gpu-suite: $(verdict "$out/gpu_tests.txt")"
  for f in "$out"/gpu_learning_*.txt; do echo "gpu-learning $(basename "$f" .txt): $(verdict "$f")"; done
  echo "cpu-suite: $(verdict "$out/cpu_tests.txt")"
  for f in "$out"/sanitizer_*.txt; do echo "$(basename "$f" .txt): $(verdict "$f")"; done
  grep -h -E '^\[  FAILED  \]' "$out/gpu_tests.txt" "$out"/gpu_learning_*.txt "$out"/sanitizer_*.txt | sort -u | head -30
} | tee "$out/summary.txt"
