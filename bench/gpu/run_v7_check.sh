#!/usr/bin/env bash
# The Profiler's ABI v7 on a real NCCL 2.31+ on the GPU machine: which ncclProfiler_vN NCCL
# loads, and whether a call's userProfilerTag (ncclAllReduceConfig) and the kernel variant
# reach the Profiler's log lines, with every op timed (the default) and with GPU timing sampled.
#
# The GPU image has NCCL 2.28.9 (ABI v5); a newer one travels as NCCL_V7_DIR: a folder holding
# include/ (nccl.h of that NCCL) and libnccl.so.2, or libnccl.so.2.xz.part* (the library
# compressed with xz and split, as the device tool carries 64 MiB a call; SHA256 beside them
# names the library's hash). Two ranks run on GPU 0 as two hosts (NCCL_HOSTID, sockets).
#
#   NCCL_V7_DIR=.nccl232 bash bench/gpu/run_v7_check.sh
#
# Output: $OUT/v7_check.jsonl (one JSON line per variant: NCCL version, the profiler version
# NCCL reports loading, op lines, tagged lines, distinct tags, kernel variants, timing
# sources) and the runs' logs under $OUT/v7_*.log.
#
# V7_VARIANTS (default "all sampled") lists the runs, each TIMING[:EVERY[:PERIOD_MS]] (the GPU
# timing settings); V7_USER_TAGS=0 runs an NCCL before 2.32 (no ncclAllReduceConfig), e.g.
# the image's own with NCCL_V7_DIR a folder of links to its include/ and lib/libnccl.so.2.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 1
OUT="${OUT:-$ROOT/build/gpu/out}"
SRC="${NCCL_V7_DIR:-$ROOT/.nccl232}"
WORK="$(mktemp -d /tmp/ci_v7.XXXXXX)"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
mkdir -p "$OUT"
log() { echo "[run_v7_check] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

LIB="$SRC/libnccl.so.2"
if [[ ! -f "$LIB" ]]; then
  LIB="$WORK/libnccl.so.2"
  python3 - "$SRC" "$LIB" <<'EOF' || die "cannot rebuild libnccl.so.2 from $SRC"
import hashlib, lzma, pathlib, sys
src, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
parts = sorted(src.glob("libnccl.so.2.xz.part*"))
if not parts:
    sys.exit(f"no libnccl.so.2.xz.part* under {src}")
data = lzma.decompress(b"".join(p.read_bytes() for p in parts))
want = (src / "SHA256").read_text().split()[0]
if hashlib.sha256(data).hexdigest() != want:
    sys.exit("libnccl.so.2 does not match SHA256")
out.write_bytes(data)
EOF
fi
[[ -f "$SRC/include/nccl.h" ]] || die "no include/nccl.h under $SRC"
CUDA_LIB="$CUDA_HOME/lib64"
[[ -d "$CUDA_LIB" ]] || CUDA_LIB="$CUDA_HOME/targets/x86_64-linux/lib"

gcc -std=c11 -O2 -Wall -Wextra -I"$SRC/include" -I"$CUDA_HOME/include" bench/gpu/hostlean_allreduce.c \
  -o "$WORK/hostlean_v7" -L"$CUDA_LIB" -lcudart "$LIB" -Wl,-rpath,"$(dirname "$LIB")" \
  -Wl,-rpath,"$CUDA_LIB" || die "hostlean_allreduce build failed"
CI_SO="$ROOT/dist/libnccl-profiler-comminsight.so"
make -s build-profiler >/dev/null 2>&1 || [[ -f "$CI_SO" ]] ||
  gcc -std=c11 -D_GNU_SOURCE -O2 -fPIC -shared -pthread -fno-strict-aliasing -fvisibility=hidden \
    -Igenerated/c/include profiler/src/*.c -o "$CI_SO" -lm -ldl || die "plugin build failed"

export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_NVLS_ENABLE=0 COMMINSIGHT_AGENT_AUTOSTART=0
for variant in ${V7_VARIANTS:-all sampled}; do
  IFS=: read -r mode every period <<<"$variant"
  timing="${variant//:/_}"
  home="$WORK/home_$timing"
  NCCL_PROFILER_PLUGIN="$CI_SO" COMMINSIGHT_HOME="$home" COMMINSIGHT_PROFILER_GPU_TIMING="$mode" \
    COMMINSIGHT_PROFILER_GPU_TIMING_EVERY="${every:-64}" COMMINSIGHT_PROFILER_GPU_TIMING_PERIOD_MS="${period:-1000}" \
    COMMINSIGHT_PROFILER_LOG_ZSTD_LEVEL=0 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV \
    "$WORK/hostlean_v7" --variant "v7_$timing" --procs 2 --user-tags "${V7_USER_TAGS:-1}" --rounds 2 --target-s 0.05 \
    --sizes 8,1048576 --model-us 40 --model-gbs 2 >"$OUT/v7_$timing.log" 2>&1
  rc=$?
  seg="$(find "$home/inspector_logs" -name '*.jsonl*' ! -name '*.zst' 2>/dev/null | sort | head -1)"
  [[ -n "$seg" ]] && head -c 20000 "$seg" >"$OUT/v7_${timing}_log_head.jsonl"
  # every op's timing source and op index, in order, per process (the sample's pattern)
  find "$home/inspector_logs" -name '*.jsonl*' ! -name '*.zst' -print0 2>/dev/null | sort -z |
    xargs -0 -r grep -ho '"i":[0-9]*,[^}]*"ts":"[a-z_]*"' | sed 's/"i":\([0-9]*\),.*"ts":"\([a-z_]*\)"/\1 \2/' \
    >"$OUT/v7_${timing}_timing.txt" || true
  python3 - "$home" "$OUT/v7_$timing.log" "$timing" "$rc" <<'EOF' | tee -a "$OUT/v7_check.jsonl"
import json, pathlib, re, sys
from collections import Counter
home, run_log, timing, rc = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
text = run_log.read_text(errors="replace")
loaded = sorted(set(re.findall(r"ncclProfiler_v\d+|Profiler: [^\n]*v\d[^\n]*", text)))[:6]
version = re.findall(r'"nccl_version":(\d+)', text)
ops = tagged = 0
tags, variants, timing_src = set(), Counter(), Counter()
for seg in sorted(pathlib.Path(home, "inspector_logs").rglob("*.jsonl*")):
    if seg.suffix == ".zst":
        continue
    for line in seg.read_bytes().splitlines():
        try:
            ci = json.loads(line).get("ci") or {}
        except ValueError:
            continue
        if ci.get("kind") not in ("c", "p", "coll", "p2p"):
            continue
        ops += 1
        tag = ci.get("ut", ci.get("user_tag"))
        if tag:
            tagged += 1
            tags.add(tag)
        variants[ci.get("kv", ci.get("kernel_variant"))] += 1
        timing_src[ci.get("ts", (json.loads(line).get("coll_perf") or {}).get("coll_timing_source"))] += 1
print(json.dumps({"bench": "v7_check", "timing": timing, "rc": rc, "nccl_version": version[:1],
                  "profiler_lines": loaded, "op_lines": ops, "tagged_lines": tagged,
                  "distinct_tags": len(tags), "max_tag": max(tags) if tags else 0,
                  "kernel_variants": dict(variants.most_common(4)),
                  "timing_sources": dict(timing_src)}))
EOF
done
grep -h -i -m5 "profiler" "$OUT"/v7_all.log >&2 || true
