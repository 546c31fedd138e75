#!/usr/bin/env bash
# Real step checks for the job-wide Step recovery (device tool): DDP, FSDP2, TP + DP with
# gradient accumulation (a 1 x 2 dp x tp mesh and a 2 x 1 one) and pipeline parallelism
# (2 stages, 1F1B and GPipe, 4 micro-batches), 2 ranks each, through the plugin, with Inject's
# step markers (COMMINSIGHT_INJECT_STEP_MARKERS=1) as the ground truth. Scored here, not there:
# bench/gpu/steps_report.py on what comes back.
#
# On nvidia-h200-x2 each rank has its GPU; on nvidia-h200 (one GPU) both ranks share it, each
# its own NCCL host (gpt_train.py / pp_train.py set NCCL_HOSTID=host-<RANK>; here
# NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1), as shared/reference/nccl-profiler-abi.md says.
# Carry from the dev machine: the Inject wheel, built by `make build-inject` or by hand into
# INJECT_WHEEL_DIR (default build/gpu-steps-jobwide, else dist/).
# ddp_hf and fsdp_verl add a trainer's own collectives (gpt_train.py --loop: HF Trainer's token
# count and logged loss, veRL's micro-batch count and clipped norm).
# Knobs: JOBS (ddp,fsdp,tpdp_tp2,tpdp_dp2,pp_1f1b,pp_gpipe,ddp_hf,fsdp_verl), STEPS (40), ACCUM (4),
# MICRO (4), GPT_ARGS (the model of gpt_train.py and pp_train.py), JOB_TIMEOUT_S (150),
# DEADLINE_S (420: no job starts past it).
# Results under $OUT: run.log, versions.json, jobs.jsonl (rc and seconds per job),
# steps.tar.gz (<job>/{inspector_logs,metadata,job,job.log} of every job).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 1
export OUT="${OUT:-$ROOT/build/gpu/out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export COMMINSIGHT_AGENT_AUTOSTART=0 NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
exec > >(tee -a "$OUT/run.log") 2>&1
T0=$(date +%s)
JOBS="${JOBS:-ddp,fsdp,tpdp_tp2,tpdp_dp2,pp_1f1b,pp_gpipe}"
STEPS="${STEPS:-40}"
ACCUM="${ACCUM:-4}"
MICRO="${MICRO:-4}"
GPT_ARGS="${GPT_ARGS:---layers 4 --dim 512 --heads 8 --seq 256 --batch 8 --warmup 5}"
JOB_TIMEOUT_S="${JOB_TIMEOUT_S:-150}"
DEADLINE_S="${DEADLINE_S:-420}"
WORK="$(mktemp -d /tmp/ci_steps_jobwide.XXXXXX)"

echo "== $(date -u +%FT%TZ) $(hostname) $(uname -r)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 - >"$OUT/versions.json" <<'PY'
import json, os, platform, subprocess, sys, torch
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip().splitlines()
print(json.dumps({"python": sys.version.split()[0], "torch": torch.__version__,
                  "cuda": torch.version.cuda, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                  "gpus": smi, "kernel": platform.release(), "cpus": os.cpu_count()}))
PY
cat "$OUT/versions.json"
echo "profiler sources sha256: $(cat profiler/src/*.c profiler/src/*.h | sha256sum | cut -c1-16)"

PLUGIN="$ROOT/dist/libnccl-profiler-comminsight.so"
EXTRA=""
if [[ -n "${CPU_DRY_RUN:-}" ]]; then
  # a check of this script without GPUs: gloo, no plugin, no build, Inject as installed
  echo "CPU_DRY_RUN: no build, no plugin, --cpu"
  PLUGIN=none EXTRA="--cpu" NGPU=2
else
  echo "== build ($(($(date +%s) - T0)) s)"
  BUILD_ONLY=1 NO_PROBE=1 bash bench/gpu/run_overhead.sh >"$WORK/build.log" 2>&1 || {
    tail -30 "$WORK/build.log"
    exit 1
  }
  WHEEL="$(ls "${INJECT_WHEEL_DIR:-build/gpu-steps-jobwide}"/comminsight_inject-*.whl \
    dist/comminsight_inject-*.whl 2>/dev/null | head -1)"
  [[ -n "$WHEEL" ]] || { echo "no Inject wheel carried (make build-inject)"; exit 1; }
  python3 -m pip install -q --no-index --no-deps --force-reinstall "$WHEEL" || exit 1
  echo "Inject: $WHEEL"
  NGPU="$(python3 -c 'import torch; print(torch.cuda.device_count())')"
fi
echo "GPUs: $NGPU"
if [[ "$NGPU" -lt 2 ]]; then
  # two ranks on one GPU: one NCCL host per rank (set by the scripts), sockets on loopback
  export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1
  echo "two ranks share GPU 0 (NCCL_HOSTID per rank, NCCL_SOCKET_IFNAME=lo)"
fi

args_of() {
  case "$1" in
    ddp) echo "gpt_train.py --mode ddp --steps $STEPS $GPT_ARGS" ;;
    fsdp) echo "gpt_train.py --mode fsdp --steps $STEPS $GPT_ARGS" ;;
    ddp_hf) echo "gpt_train.py --mode ddp --loop hf --accum $ACCUM --steps $STEPS $GPT_ARGS" ;;
    fsdp_verl) echo "gpt_train.py --mode fsdp --loop verl --accum $ACCUM --steps $STEPS $GPT_ARGS" ;;
    tpdp_tp2) echo "gpt_train.py --mode tpdp --tp 2 --accum $ACCUM --steps $STEPS $GPT_ARGS" ;;
    tpdp_dp2) echo "gpt_train.py --mode tpdp --tp 1 --accum $ACCUM --steps $STEPS $GPT_ARGS" ;;
    pp_1f1b) echo "pp_train.py --schedule 1f1b --microbatches $MICRO --steps $STEPS $GPT_ARGS" ;;
    pp_gpipe) echo "pp_train.py --schedule gpipe --microbatches $MICRO --steps $STEPS $GPT_ARGS" ;;
    *) return 1 ;;
  esac
}

rc=0
done_jobs=()
for job in ${JOBS//,/ }; do
  now=$(($(date +%s) - T0))
  if ((now > DEADLINE_S)); then
    echo "== $job skipped: past DEADLINE_S ($now s)"
    rc=1
    continue
  fi
  a="$(args_of "$job")" || { echo "unknown job $job"; rc=1; continue; }
  home="$WORK/$job"
  mkdir -p "$home"
  echo "== $job ($now s): bench/gpu/$a"
  t=$(date +%s)
  # shellcheck disable=SC2086
  COMMINSIGHT_HOME="$home" NCCL_PROFILER_PLUGIN="$PLUGIN" COMMINSIGHT_INJECT_STEP_MARKERS=1 \
    timeout "$JOB_TIMEOUT_S" python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
    bench/gpu/$a $EXTRA --out "$home/job" >"$home/job.log" 2>&1
  job_rc=$?
  secs=$(($(date +%s) - t))
  segs=$(ls "$home/inspector_logs" 2>/dev/null | wc -l)
  marks=$(cat "$home"/metadata/inject/*.jsonl 2>/dev/null | grep -c '"kind":"step"')
  echo "$job rc=$job_rc ${secs}s segments=$segs step_markers=$marks"
  printf '{"job":"%s","rc":%d,"seconds":%d,"segments":%d,"step_markers":%d,"args":"%s"}\n' \
    "$job" "$job_rc" "$secs" "$segs" "$marks" "$a" >>"$OUT/jobs.jsonl"
  if [[ "$job_rc" != 0 ]]; then
    rc=1
    tail -25 "$home/job.log"
  else
    grep -E "NCCL WARN|Error" "$home/job.log" | head -5
  fi
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('  median step ms', round(d['median_step_ms'], 2), 'params', d['params'])" \
    "$home/job/rank0.json" 2>/dev/null
  done_jobs+=("$job")
done
if ((${#done_jobs[@]})); then
  keep=()
  for j in "${done_jobs[@]}"; do
    for part in inspector_logs metadata job job.log; do
      [[ -e "$WORK/$j/$part" ]] && keep+=("$j/$part")
    done
  done
  tar czf "$OUT/steps.tar.gz" -C "$WORK" "${keep[@]}"
  ls -la "$OUT/steps.tar.gz"
fi
echo "== done rc=$rc ($(($(date +%s) - T0)) s)"
exit $rc
