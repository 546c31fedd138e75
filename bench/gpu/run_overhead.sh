#!/usr/bin/env bash
# End-to-end overhead of the CommInsight NCCL profiler plugin on the GPU machine (DESIGN §8,
# issue 3 "Benchmarks"). One command:
#   1. builds build/gpu/hostlean_allreduce (against nccl.h / libnccl.so.2 of the
#      nvidia-nccl-cu13 wheel in python3's site-packages, CUDA under /usr/local/cuda),
#      dist/libnccl-profiler-comminsight.so (make build-profiler, else gcc with its flags) and
#      build/gpu/libnccl-profiler-empty.so (profiler/bench/empty_plugin.c);
#   2. runs one small probe per plugin with NCCL_DEBUG=INFO into $OUT/nccl_info_probe.log and
#      prints NCCL's profiler-plugin lines (which ncclProfiler_vN NCCL picked);
#   3. alternates the variants round after round, rotating their order, so that drift and
#      noise hit all alike: none (NCCL_PROFILER_PLUGIN=none), empty_mask70,
#      comminsight_mask70 (default mask), comminsight_mask6 (GPU timing off), empty_mask6;
#      each CommInsight run gets a fresh COMMINSIGHT_HOME;
#   4. bench/gpu/overhead_report.py: medians per size and variant, ratios CommInsight/empty
#      with the same mask, and a records check of every CommInsight run's sealed logs.
# JSON lines go to stdout and $OUT/overhead.jsonl; every sample to $OUT/overhead_raw.jsonl.
#
# Knobs (environment): ROUNDS (outer alternation rounds, 4), INNER_ROUNDS (rounds inside each
# process, 2), TARGET_S (seconds per size per inner round, 0.25), SIZES (bytes, comma list),
# DEADLINE_S (no new outer round starts once it would end past this many seconds, 300),
# KEEP_HOMES=1 (keep the CommInsight homes), BUILD_ONLY=1 (step 1 only), NO_PROBE=1.
# OUT defaults to build/gpu/out when not run through the device tool.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/build/gpu/out}"
BUILD="$ROOT/build/gpu"
WORK="${WORK:-$(mktemp -d /tmp/ci_gpu_overhead.XXXXXX)}"
ROUNDS="${ROUNDS:-4}"
INNER_ROUNDS="${INNER_ROUNDS:-2}"
TARGET_S="${TARGET_S:-0.25}"
SIZES="${SIZES:-8,65536,1048576,16777216,268435456}"
DEADLINE_S="${DEADLINE_S:-300}"
PY="${PYTHON:-python3}"
CC="${CC:-gcc}"
mkdir -p "$OUT" "$BUILD" "$WORK"

# NVLink multicast stays off on the shared GPU machines (device KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export COMMINSIGHT_AGENT_AUTOSTART=0
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"

log() { echo "[run_overhead] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---- 1. build ----
SITE="$("$PY" -c 'import site; print(site.getsitepackages()[0])')" || die "no python3"
NCCL_DIR="${NCCL_DIR:-$SITE/nvidia/nccl}"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
[[ -f "$NCCL_DIR/include/nccl.h" ]] || die "no nccl.h under $NCCL_DIR/include"
[[ -f "$NCCL_DIR/lib/libnccl.so.2" ]] || die "no libnccl.so.2 under $NCCL_DIR/lib"
CUDA_LIB="$CUDA_HOME/lib64"
[[ -d "$CUDA_LIB" ]] || CUDA_LIB="$CUDA_HOME/targets/x86_64-linux/lib"

log "building hostlean_allreduce against $NCCL_DIR"
"$CC" -std=c11 -O2 -Wall -Wextra -I"$NCCL_DIR/include" -I"$CUDA_HOME/include" \
  bench/gpu/hostlean_allreduce.c -o "$BUILD/hostlean_allreduce" \
  -L"$CUDA_LIB" -lcudart "$NCCL_DIR/lib/libnccl.so.2" \
  -Wl,-rpath,"$NCCL_DIR/lib" -Wl,-rpath,"$CUDA_LIB" || die "hostlean_allreduce build failed"

CI_SO="$ROOT/dist/libnccl-profiler-comminsight.so"
log "building the CommInsight plugin"
# On the GPU machine CC may name a gcc whose LTO plugin does not run ("could not run
# lto-wrapper"): then the system gcc, then the Makefile's flags without -flto and -Werror.
if ! make --no-print-directory build-profiler >&2; then
  log "make build-profiler failed; trying CC=/usr/bin/gcc"
  if ! make --no-print-directory build-profiler CC=/usr/bin/gcc >&2; then
    log "building with $CC directly, without -flto and -Werror"
    mkdir -p dist
    "$CC" -std=c11 -D_GNU_SOURCE -Wall -Wextra -fPIC -shared -pthread -fvisibility=hidden \
      -Igenerated/c/include -O2 -g profiler/src/*.c -o "$CI_SO" -lm ||
      die "CommInsight plugin build failed"
  fi
fi
[[ -f "$CI_SO" ]] || die "no $CI_SO"

EMPTY_SO="$BUILD/libnccl-profiler-empty.so"
log "building the empty plugin"
"$CC" -std=c11 -O2 -shared -fPIC -Igenerated/c/include profiler/bench/empty_plugin.c \
  -o "$EMPTY_SO" || die "empty plugin build failed"
[[ "${BUILD_ONLY:-0}" == 1 ]] && { log "built: $BUILD/hostlean_allreduce $CI_SO $EMPTY_SO"; exit 0; }

HOSTLEAN="$BUILD/hostlean_allreduce"

# Environment of one variant, as NAME=VALUE words for env(1).
variant_env() {
  local v="$1" home="$2"
  case "$v" in
    none) echo "NCCL_PROFILER_PLUGIN=none" ;;
    empty_mask70) echo "NCCL_PROFILER_PLUGIN=$EMPTY_SO COMMINSIGHT_PROFILER_EVENT_MASK=70" ;;
    empty_mask6) echo "NCCL_PROFILER_PLUGIN=$EMPTY_SO COMMINSIGHT_PROFILER_EVENT_MASK=6" ;;
    comminsight_mask70)
      echo "NCCL_PROFILER_PLUGIN=$CI_SO COMMINSIGHT_PROFILER_EVENT_MASK=70 COMMINSIGHT_HOME=$home" ;;
    comminsight_mask6)
      echo "NCCL_PROFILER_PLUGIN=$CI_SO COMMINSIGHT_PROFILER_EVENT_MASK=6 COMMINSIGHT_HOME=$home" ;;
    *) die "unknown variant $v" ;;
  esac
}

# The plugin's SHM lives in /dev/shm with a link under <home>/shms: remove what our runs made.
clean_home() {
  local home="$1" f t
  for f in "$home"/shms/*; do
    [[ -L "$f" ]] || continue
    t="$(readlink -f "$f")"
    [[ "$t" == /dev/shm/* ]] && rm -f "$t"
  done
  [[ "${KEEP_HOMES:-0}" == 1 ]] || rm -rf "$home"
}

# ---- 2. probe: which profiler ABI NCCL picks, plugin load errors ----
if [[ "${NO_PROBE:-0}" != 1 ]]; then
  PROBE_LOG="$OUT/nccl_info_probe.log"
  : >"$PROBE_LOG"
  for v in comminsight_mask70 empty_mask70; do
    home="$WORK/probe_$v.home"
    log "probe $v (NCCL_DEBUG=INFO)"
    echo "==== probe $v ====" >>"$PROBE_LOG"
    # shellcheck disable=SC2046
    env $(variant_env "$v" "$home") NCCL_DEBUG=INFO COMMINSIGHT_PROFILER_DEBUG=1 \
      "$HOSTLEAN" --variant "probe_$v" --rounds 1 --target-s 0.02 --sizes 8,1048576 \
      >>"$PROBE_LOG" 2>&1
    echo "==== rc=$? ====" >>"$PROBE_LOG"
    [[ -d "$home" ]] && clean_home "$home"
  done
  log "NCCL profiler lines of the probes:"
  grep -iE "profiler|==== " "$PROBE_LOG" | head -40 >&2
fi

# ---- 3. alternate ----
VARIANTS=(none empty_mask70 comminsight_mask70 comminsight_mask6 empty_mask6)
NV=${#VARIANTS[@]}
MANIFEST="$WORK/manifest.jsonl"
: >"$MANIFEST"
t_start=$SECONDS
for ((r = 0; r < ROUNDS; r++)); do
  elapsed=$((SECONDS - t_start))
  if ((r > 0)); then
    per_round=$((elapsed / r))
    if ((elapsed + per_round > DEADLINE_S)); then
      log "stopping after $r rounds: another (~${per_round}s) would pass DEADLINE_S=$DEADLINE_S"
      break
    fi
  fi
  for ((i = 0; i < NV; i++)); do
    v="${VARIANTS[$(((i + r) % NV))]}"
    out="$WORK/r${r}_$v.out"
    home=""
    [[ "$v" == comminsight_* ]] && home="$WORK/r${r}_$v.home"
    # shellcheck disable=SC2046
    env $(variant_env "$v" "$home") \
      "$HOSTLEAN" --variant "$v" --rounds "$INNER_ROUNDS" --target-s "$TARGET_S" \
      --sizes "$SIZES" >"$out" 2>&1
    rc=$?
    printf '{"round":%d,"variant":"%s","out":"%s","home":%s,"rc":%d}\n' "$r" "$v" "$out" \
      "$([[ -n "$home" ]] && echo "\"$home\"" || echo null)" "$rc" >>"$MANIFEST"
    log "round $r $v rc=$rc ($((SECONDS - t_start))s): $(grep -o '"size":"[^"]*"\|"us_per_iter":[0-9.]*' "$out" | paste -sd' ' | sed 's/"size"://g; s/"us_per_iter"://g')"
  done
done

# ---- 4. report ----
"$PY" "$ROOT/bench/gpu/overhead_report.py" --work "$WORK" --out "$OUT/overhead.jsonl" \
  --raw "$OUT/overhead_raw.jsonl"
rc=$?
while read -r home; do
  clean_home "$home"
done < <(grep -o '"home":"[^"]*"' "$MANIFEST" | cut -d'"' -f4)
[[ "${KEEP_HOMES:-0}" == 1 ]] || rm -rf "$WORK"
exit $rc
