#!/usr/bin/env bash
# Everything bench/gpu/ does on the GPU machine, in one command (device tool, nvidia-h200-x2):
#   0. versions and GPUs into $OUT/run.log;
#   1. builds (run_overhead.sh BUILD_ONLY=1): hostlean_allreduce, the CommInsight plugin, the
#      empty plugin;
#   2. the PyTorch records check (torch_allreduce_check.py under torchrun, 2 ranks, fresh
#      COMMINSIGHT_HOME), then the same check again after torchrun exited (--verify-only);
#   3. the alternating host-lean overhead runs (run_overhead.sh).
# Results: $OUT/torch_records.jsonl, $OUT/torch_verify.jsonl, $OUT/overhead.jsonl,
# $OUT/overhead_raw.jsonl, $OUT/nccl_info_probe.log, $OUT/run.log (everything printed).
# Knobs: TORCH_ITERS (200), and run_overhead.sh's (ROUNDS, INNER_ROUNDS, TARGET_S, SIZES,
# DEADLINE_S, here 260 by default).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
export OUT="${OUT:-$ROOT/build/gpu/out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export COMMINSIGHT_AGENT_AUTOSTART=0
export DEADLINE_S="${DEADLINE_S:-260}" # keeps the whole command well inside 540 s
PY="${PYTHON:-python3}"
LOG="$OUT/run.log"
: >"$LOG"

{
  echo "== $(date -u +%FT%TZ) $(hostname) $(uname -r)"
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.version.cuda, "gpus", torch.cuda.device_count(), "nccl", torch.cuda.nccl.version())'
  gcc --version | head -1
  command -v make || echo "make: not installed"
  nvidia-smi topo -m 2>/dev/null | head -4
  echo "profiler sources sha256: $(cat profiler/src/*.c profiler/src/*.h | sha256sum | cut -c1-16)"
} 2>&1 | tee -a "$LOG"

echo "== build" | tee -a "$LOG"
BUILD_ONLY=1 bash bench/gpu/run_overhead.sh 2>&1 | tee -a "$LOG" || {
  echo "build failed" | tee -a "$LOG"
  exit 1
}

echo "== torch records check" | tee -a "$LOG"
CI_HOME="$(mktemp -d /tmp/ci_torch_home.XXXXXX)"
TDIR="$(mktemp -d /tmp/ci_torch_out.XXXXXX)"
COMMINSIGHT_HOME="$CI_HOME" NCCL_DEBUG="${NCCL_DEBUG:-WARN}" \
  NCCL_PROFILER_PLUGIN="$ROOT/dist/libnccl-profiler-comminsight.so" \
  timeout 150 "$PY" -m torch.distributed.run --standalone --nproc_per_node=2 \
  bench/gpu/torch_allreduce_check.py --iters "${TORCH_ITERS:-200}" --out "$TDIR" 2>&1 |
  tee -a "$LOG"
echo "torchrun rc=${PIPESTATUS[0]}" | tee -a "$LOG"
echo "== torch records check, after exit" | tee -a "$LOG"
COMMINSIGHT_HOME="$CI_HOME" "$PY" bench/gpu/torch_allreduce_check.py --verify-only --world 2 \
  --out "$TDIR" 2>&1 | tee -a "$LOG"
cp "$TDIR/torch_records.jsonl" "$OUT/torch_records.jsonl" 2>/dev/null
cp "$TDIR/verify.jsonl" "$OUT/torch_verify.jsonl" 2>/dev/null
du -sh "$CI_HOME" 2>&1 | tee -a "$LOG"
for f in "$CI_HOME"/shms/*; do
  [[ -L "$f" ]] && t="$(readlink -f "$f")" && [[ "$t" == /dev/shm/* ]] && rm -f "$t"
done
rm -rf "$CI_HOME" "$TDIR"

echo "== overhead" | tee -a "$LOG"
bash bench/gpu/run_overhead.sh 2>&1 | tee -a "$LOG"
echo "run_overhead rc=${PIPESTATUS[0]}" | tee -a "$LOG"
