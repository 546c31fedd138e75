#!/usr/bin/env bash
# Inject on 2xH200 (device tool, nvidia-h200-x2): torch 2.11 + NCCL 2.28.9 jobs whose every
# communicator must carry `<group_desc>:<group_name>` in the profiler's records and the Agent's
# API. Needs, carried from the dev machine: dist/comminsight_inject-*.whl (make build-inject),
# build/agent-wheels/ (the Agent's runtime wheels for Python 3.12) and build/agent-src/ (git
# archive of comminsight/ and generated/python/ at HEAD): bench/gpu/prep_faults_carry.sh.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
export OUT="${OUT:-$ROOT/build/gpu/out}"
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 COMMINSIGHT_AGENT_AUTOSTART=0
BUILD_ONLY=1 bash bench/gpu/run_overhead.sh >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
# the wheel into the environment that runs the workload, as `make install` does
python3 -m pip install -q --no-index --no-deps --force-reinstall dist/comminsight_inject-*.whl || exit 1
python3 -X importtime -c pass 2>&1 | grep -E "comminsight_inject|import time: self" | head -5
AGENT_SITE=/tmp/agent-site
python3 -m pip install -q --no-index --no-deps --no-compile --target "$AGENT_SITE" build/agent-wheels/*.whl || exit 1
AGENT_PATH="$AGENT_SITE:$ROOT/build/agent-src:$ROOT/build/agent-src/generated/python"
# what the API client needs (httpx, attrs) where the image's python lacks it (bench/gpu/agent_api.py)
export AGENT_PYTHONPATH="$AGENT_PATH"
rc=0
for mode in eager lazy; do
  home="$(mktemp -d /tmp/ci_inject_home.XXXXXX)"
  port=$((19300 + RANDOM % 500))
  COMMINSIGHT_HOME="$home" COMMINSIGHT_AGENT_LISTEN="127.0.0.1:$port" PYTHONPATH="$AGENT_PATH" \
    python3 -m comminsight.agent.main >"$home/agent.log" 2>&1 &
  agent=$!
  python3 - "$port" <<'PY'
import sys, time, urllib.request
for _ in range(100):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/api/v1/health", timeout=1)
        break
    except OSError:
        time.sleep(0.2)
PY
  COMMINSIGHT_HOME="$home" NCCL_PROFILER_PLUGIN="$ROOT/dist/libnccl-profiler-comminsight.so" \
    COMMINSIGHT_INJECT_STEP_MARKERS=1 timeout 200 python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
    bench/gpu/inject_names.py --mode "$mode" --out "$home/out" --api "http://127.0.0.1:$port" \
    >"$home/job.log" 2>&1
  job_rc=$?
  echo "$mode job rc=$job_rc"
  [ "$job_rc" = 0 ] || tail -30 "$home/job.log" "$home/agent.log"
  kill "$agent"; wait "$agent" 2>/dev/null
  echo "== $mode"
  COMMINSIGHT_HOME="$home" python3 bench/gpu/inject_names.py --verify --out "$home/out" | tee "$OUT/inject_$mode.jsonl" || rc=1
  mkdir -p "$OUT/$mode"
  cat "$home"/metadata/inject/*.jsonl > "$OUT/$mode/metadata.jsonl" 2>/dev/null
  cp "$home/out/api_communicators.json" "$OUT/$mode/api_communicators.json" 2>/dev/null
done
exit $rc
