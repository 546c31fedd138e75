#!/usr/bin/env bash
# Faults inside real training, checked as the Agent's incidents (device tool; one H200 with
# both ranks on it, or nvidia-h200-x2): a no-fault control, a sleeping rank, a skipped bucket
# all-reduce, an extra 1-element all-reduce, a pipeline send/send deadlock
# (bench/gpu/fault_train.py), each with a fresh home and a live Agent
# (bench/gpu/faults_driver.py), scored by bench/gpu/faults_report.py.
#
# Carry from the dev machine (bench/gpu/prep_faults_carry.sh makes them): build/agent-wheels
# (the Agent's runtime wheels for Python 3.12), build/agent-src (git
# archive of comminsight/ and generated/python/) and the Inject wheel
# (INJECT_WHEEL_DIR, default build/gpu-faults, else dist/comminsight_inject-*.whl).
# Knobs: FAULTS (none,sleep,skip,extra,sendsend), THRESHOLD_S (5), AT (8), SLEEP_S (120),
# ASYNC_ERROR_HANDLING (0: an NCCL error leaves the job as it is, as a hang; '' keeps torch's
# default, which tears the job down), JOB_ARGS (more fault_train.py arguments),
# DEADLINE_S (330: no fault starts past it), JOB_DEADLINE_S (75 per fault).
# CPU_DRY_RUN=1: gloo, no build, no plugin, no Inject install, the Agent of this python.
# Results under $OUT: run.log, versions.json, faults.jsonl, incidents.jsonl, faults_summary.md.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 1
export OUT="${OUT:-$ROOT/build/gpu/out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export COMMINSIGHT_AGENT_AUTOSTART=0
exec > >(tee -a "$OUT/run.log") 2>&1
T0=$(date +%s)
PY="${PYTHON:-python3}"
echo "== $(date -u +%FT%TZ) $(hostname) $(uname -r)"
for k in net.ipv4.tcp_rmem net.ipv4.tcp_wmem net.core.rmem_max net.core.wmem_max; do
  echo "$k = $(sysctl -n "$k" 2>/dev/null)"  # what a send can buffer between the two ranks
done

DRY=()
if [[ -n "${CPU_DRY_RUN:-}" ]]; then
  echo "CPU_DRY_RUN: gloo, no build, no plugin, the Agent of $PY"
  DRY=(--cpu)
else
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$PY" - >"$OUT/versions.json" <<'PY'
import json, os, platform, subprocess, sys, torch
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip().splitlines()
print(json.dumps({"python": sys.version.split()[0], "torch": torch.__version__,
                  "cuda": torch.version.cuda, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                  "gpus": smi, "kernel": platform.release(), "cpus": os.cpu_count()}))
PY
  cat "$OUT/versions.json"
  echo "profiler sources sha256: $(cat profiler/src/*.c profiler/src/*.h | sha256sum | cut -c1-16)"
  echo "== build ($(($(date +%s) - T0)) s)"
  BUILD_ONLY=1 NO_PROBE=1 bash bench/gpu/run_overhead.sh >"$ROOT/build/gpu_faults_build.log" 2>&1 || {
    tail -30 "$ROOT/build/gpu_faults_build.log"
    exit 1
  }
  WHEEL="$(ls "${INJECT_WHEEL_DIR:-build/gpu-faults}"/comminsight_inject-*.whl \
    dist/comminsight_inject-*.whl 2>/dev/null | head -1)"
  [[ -n "$WHEEL" ]] || { echo "no Inject wheel carried (make build-inject)"; exit 1; }
  "$PY" -m pip install -q --no-index --no-deps --force-reinstall "$WHEEL" || exit 1
  echo "Inject: $WHEEL"
  WHEELS="$(ls -d build/agent-wheels 2>/dev/null | head -1)"
  [[ -n "$WHEELS" && -d build/agent-src ]] || {
    echo "carry build/agent-wheels and build/agent-src (bench/gpu/prep_faults_carry.sh)"
    exit 1
  }
  AGENT_SITE=/tmp/agent-site
  "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$AGENT_SITE" \
    "$WHEELS"/*.whl || exit 1
  NATIVE=build/agent-src/comminsight/semantic/native
  /usr/bin/gcc -std=gnu11 -O2 -fPIC -shared -ffp-contract=off "$NATIVE/engine_core.c" \
    -Ibuild/agent-src/generated/c/include \
    -o "$NATIVE/libciengine.so" || exit 1
  export AGENT_PYTHONPATH="$AGENT_SITE:$ROOT/build/agent-src:$ROOT/build/agent-src/generated/python"
  # the Agent runs from its home (cwd), so build/agent-src is what it imports
  (cd /tmp && PYTHONPATH="$AGENT_PYTHONPATH" "$PY" -c '
import comminsight.agent.main, comminsight.semantic.native as n
n.lib(); print("agent imports ok; engine core", n.LIBRARY)') || exit 1
  NGPU="$("$PY" -c 'import torch; print(torch.cuda.device_count())')"
  echo "GPUs: $NGPU"
  if [[ "$NGPU" -lt 2 ]]; then
    # two ranks on one GPU: one NCCL host per rank (fault_train.py sets NCCL_HOSTID),
    # sockets on loopback (shared/reference/nccl-profiler-abi.md "Two ranks on one GPU")
    export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1
    echo "two ranks share GPU 0"
  fi
fi

echo "== faults ($(($(date +%s) - T0)) s)"
"$PY" bench/gpu/faults_driver.py --out "$OUT" "${DRY[@]}" \
  --faults "${FAULTS:-none,sleep,skip,extra,sendsend}" --threshold-s "${THRESHOLD_S:-5}" \
  --at "${AT:-8}" --sleep-s "${SLEEP_S:-120}" \
  --async-error-handling="${ASYNC_ERROR_HANDLING-0}" --job-args="${JOB_ARGS:-}" \
  --deadline-s "${DEADLINE_S:-330}" --job-deadline-s "${JOB_DEADLINE_S:-75}"
rc=$?
echo "== done rc=$rc ($(($(date +%s) - T0)) s)"
exit $rc
