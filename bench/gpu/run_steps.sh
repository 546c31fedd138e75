#!/usr/bin/env bash
# Real PyTorch training through the plugin, for scoring the Semantic Engine (device tool,
# nvidia-h200-x2): DDP and FSDP2 jobs of bench/gpu/train_steps.py under torchrun, 2 ranks,
# each with a fresh COMMINSIGHT_HOME; their logs and step markers are packed into
# $OUT/<mode>.tar.gz for bench/gpu/steps_report.py (run anywhere, no GPU needed).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
export OUT="${OUT:-$ROOT/build/gpu/out}"
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 COMMINSIGHT_AGENT_AUTOSTART=0
BUILD_ONLY=1 bash bench/gpu/run_overhead.sh >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
for mode in ddp fsdp; do
  home="$(mktemp -d /tmp/ci_steps_home.XXXXXX)"
  COMMINSIGHT_HOME="$home" NCCL_PROFILER_PLUGIN="$ROOT/dist/libnccl-profiler-comminsight.so" \
    timeout 200 python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
    bench/gpu/train_steps.py --mode "$mode" --steps "${STEPS:-30}" --out "$home/markers" \
    >"$OUT/$mode.log" 2>&1
  echo "$mode rc=$?"
  tar czf "$OUT/$mode.tar.gz" -C "$home" inspector_logs markers
done
