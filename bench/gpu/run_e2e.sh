#!/usr/bin/env bash
# End to end on 2xH200 (device tool, kind nvidia-h200-x2), one command:
#   hangs (4 injected faults, live Agent), training throughput with/without CommInsight (GPT
#   DDP and FSDP2), fail-open (Agent SIGKILLed mid-run, unwritable log directory), and the
#   TP+DP 2-D DeviceMesh job with gradient accumulation; see bench/gpu/e2e_driver.py.
# Carry from the dev machine (bench/gpu/prep_faults_carry.sh makes them): build/agent-wheels
# (the Agent's runtime wheels for Python 3.12), build/agent-src (git archive HEAD comminsight
# generated/python) and dist/comminsight_inject-*.whl (make build-inject).
# Knobs: SECTIONS (hangs,train,failopen,tpdp; tpdp4 adds the 2x2 mesh on 4 processes; turns
# runs bench/gpu/throughput_turns.py after the rest), FAULTS, THRESHOLD_S (5), STEPS (300),
# REPS (2), DEADLINE_S (500: the driver starts nothing new past it), REP_BASE, KEEP_TRAIN;
# for turns: TURN_JOBS (ddp,fsdp), TURN_VARIANTS (none,ci,inspector,none), SESSIONS (2),
# BLOCKS (30), BLOCK_STEPS (ddp=20,fsdp=10), JOB_ARGS (more gpt_train.py arguments),
# TURNS_DEADLINE_S (300); the inspector copy needs build/nccl-inspector-src
# (bench/gpu/get_inspector_src.sh) carried too.
# Results under $OUT: run.log, versions.json, hangs.jsonl, hang_reports.jsonl, train.jsonl,
# steps.tar.gz, turns.jsonl (bench/gpu/e2e_report.py turns them into results/gpu.md).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
export OUT="${OUT:-$ROOT/build/gpu/out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export COMMINSIGHT_AGENT_AUTOSTART=0
LOG="$OUT/run.log"
exec > >(tee -a "$LOG") 2>&1
T0=$(date +%s)
echo "== $(date -u +%FT%TZ) $(hostname) $(uname -r)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 - >"$OUT/versions.json" <<'PY'
import json, platform, subprocess, sys, torch
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip().splitlines()
print(json.dumps({"python": sys.version.split()[0], "torch": torch.__version__,
                  "cuda": torch.version.cuda, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                  "gpus": smi, "kernel": platform.release(), "cpus": __import__("os").cpu_count()}))
PY
cat "$OUT/versions.json"
echo "profiler sources sha256: $(cat profiler/src/*.c profiler/src/*.h | sha256sum | cut -c1-16)"

echo "== build ($(($(date +%s) - T0)) s)"
BUILD_ONLY=1 NO_PROBE=1 bash bench/gpu/run_overhead.sh >"$ROOT/build/gpu_build.log" 2>&1 || {
  tail -30 "$ROOT/build/gpu_build.log"
  exit 1
}
python3 -m pip install -q --no-index --no-deps --force-reinstall dist/comminsight_inject-*.whl || exit 1
AGENT_SITE=/tmp/agent-site
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$AGENT_SITE" build/agent-wheels/*.whl || exit 1
NATIVE=build/agent-src/comminsight/semantic/native
/usr/bin/gcc -std=gnu11 -O2 -fPIC -shared -ffp-contract=off "$NATIVE/engine_core.c" \
  -Ibuild/agent-src/generated/c/include \
  -o "$NATIVE/libciengine.so" || exit 1
export AGENT_PYTHONPATH="$AGENT_SITE:$ROOT/build/agent-src:$ROOT/build/agent-src/generated/python"
# the Agent runs from its home (cwd), so build/agent-src is what it imports
(cd /tmp && PYTHONPATH="$AGENT_PYTHONPATH" python3 -c '
import comminsight.agent.main, comminsight.semantic.native as n
n.lib(); print("agent imports ok; engine core", n.LIBRARY)') || exit 1
SECTIONS="${SECTIONS:-hangs,train,failopen,tpdp}"
DRIVER_SECTIONS="$(tr ',' '\n' <<<"$SECTIONS" | grep -vx turns | paste -sd, -)"
rc=0
if [[ -n "$DRIVER_SECTIONS" ]]; then
  echo "== driver ($(($(date +%s) - T0)) s)"
  python3 bench/gpu/e2e_driver.py --out "$OUT" --sections "$DRIVER_SECTIONS" \
    --faults "${FAULTS:-skip,sleep,kill,mismatch}" --threshold-s "${THRESHOLD_S:-5}" \
    --steps "${STEPS:-300}" --reps "${REPS:-2}" --deadline-s "${DEADLINE_S:-500}" \
    --rep-base "${REP_BASE:-0}" --keep-train "${KEEP_TRAIN:-1}"
  rc=$?
fi
if [[ ",$SECTIONS," == *,turns,* ]]; then
  echo "== turns ($(($(date +%s) - T0)) s)"
  python3 bench/gpu/throughput_turns.py --out "$OUT" --jobs "${TURN_JOBS:-ddp,fsdp}" \
    --variants "${TURN_VARIANTS:-none,ci,inspector,none}" --sessions "${SESSIONS:-2}" \
    --blocks "${BLOCKS:-30}" --deadline-s "${TURNS_DEADLINE_S:-300}" \
    --block-steps "${BLOCK_STEPS:-ddp=20,fsdp=10}" --job-args "${JOB_ARGS:-}" || rc=1
fi
echo "== done rc=$rc ($(($(date +%s) - T0)) s)"
exit $rc
