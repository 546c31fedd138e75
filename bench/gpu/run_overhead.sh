#!/usr/bin/env bash
# End-to-end overhead of the CommInsight NCCL profiler plugin on the GPU machine (architecture §8).
# One command:
#   1. builds build/gpu/hostlean_allreduce (against nccl.h / libnccl.so.2 of the
#      nvidia-nccl-cu13 wheel in python3's site-packages, CUDA under /usr/local/cuda),
#      dist/libnccl-profiler-comminsight.so (make build-profiler, else gcc with its flags),
#      build/gpu/libnccl-profiler-empty.so (profiler/bench/empty_plugin.c) and, when
#      bench/gpu/get_inspector_src.sh has put NVIDIA's NCCL Inspector source under
#      build/nccl-inspector-src/ (or INSPECTOR_SRC names its ext-profiler/inspector folder),
#      build/gpu/libnccl-profiler-inspector.so (g++, its Makefile's flags);
#   2. runs one small probe per plugin with NCCL_DEBUG=INFO into $OUT/nccl_info_probe.log and
#      prints NCCL's profiler-plugin lines (which ncclProfiler_vN NCCL picked);
#   3. alternates the variants round after round, rotating their order, so that drift and
#      noise hit all alike: none (NCCL_PROFILER_PLUGIN=none), empty_mask70,
#      comminsight_mask70 (default mask), comminsight_sampled (default mask, GPU timing
#      sampled), comminsight_mask6 (GPU timing off), empty_mask6,
#      and when the Inspector was built inspector (NCCL_INSPECTOR_ENABLE=1) and empty_mask66
#      (the empty plugin with the Inspector's mask Coll|KernelCh); each CommInsight run gets a
#      fresh COMMINSIGHT_HOME, each Inspector run a fresh NCCL_INSPECTOR_DUMP_DIR, whose
#      files, bytes and JSON records are counted into the manifest, then removed;
#   4. bench/gpu/overhead_report.py: medians per size and variant, ratios CommInsight/empty
#      and Inspector/empty with the same mask, a records check of every CommInsight run's
#      sealed logs, and the records each Inspector run wrote against the ops it issued.
# JSON lines go to stdout and $OUT/overhead.jsonl; every sample to $OUT/overhead_raw.jsonl.
#
# Knobs (environment): ROUNDS (outer alternation rounds, 4), INNER_ROUNDS (rounds inside each
# process, 2), TARGET_S (seconds per size per inner round, 0.25), SIZES (bytes, comma list),
# DEADLINE_S (no new outer round starts once it would end past this many seconds, 300),
# KEEP_HOMES=1 (keep the CommInsight homes, the Inspector's dump dirs and $WORK),
# BUILD_ONLY=1 (step 1 only), NO_PROBE=1, VARIANTS (space-separated, default all of step 3),
# HOSTLEAN_ARGS (extra arguments of every hostlean_allreduce run, e.g. --procs 2),
# INSPECTOR_SRC, INSPECTOR_INTERVAL_US (the Inspector's
# NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS, 500 as in its README), CXX (g++).
# OUT defaults to build/gpu/out when not run through the device tool.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 1
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
CXX="${CXX:-g++}"
INSPECTOR_SRC="${INSPECTOR_SRC:-$ROOT/build/nccl-inspector-src/ext-profiler/inspector}"
# extra hostlean_allreduce arguments, e.g. "--procs 2 --model-us 40 --model-gbs 1.5" for two
# ranks on one GPU (with NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 in the environment)
HOSTLEAN_ARGS="${HOSTLEAN_ARGS:-}"
# NCCL v2.28.9's inspector.cc sleeps {interval / 10^6 s, interval % 10^6 ns} between dumps:
# below one second the "microseconds" are nanoseconds, so 500 makes its dump thread wake every
# ~0.5 µs plus the dump itself. 0 (its default when unset) starts no dump thread: the Inspector
# then tracks every collective but writes nothing.
INSPECTOR_INTERVAL_US="${INSPECTOR_INTERVAL_US:-500}"
mkdir -p "$OUT" "$BUILD" "$WORK"

# NVLink multicast stays off on the shared GPU machines (device KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export COMMINSIGHT_AGENT_AUTOSTART=0
# sealed segments stay uncompressed: the GPU image's Python can read no zstd (before 3.14)
export COMMINSIGHT_PROFILER_LOG_ZSTD_LEVEL=0
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

# NVIDIA's NCCL Inspector (ext-profiler/inspector of NCCL; not in this repository: see
# bench/gpu/get_inspector_src.sh). Its Makefile compiles version.cc (made by a git script that
# the exported folder lacks) inspector_plugin.cc inspector.cc json.cc with
#   g++ -I$NCCL_HOME/include -I$CUDA_HOME/include -Inccl -g -O3 -fPIC -shared -march=native
#       -DNDEBUG -Wall -Wextra -Wl,-soname,libnccl-profiler-inspector.so
# Here the same, without -march=native: the CommInsight and empty plugins are built for the
# generic x86-64 target (no -march), so neither side gets an ISA advantage in the comparison
# (the Inspector's hot path is rwlocks, gettimeofday and calloc, which -march hardly touches).
# It keeps upstream's -O3 (ours is -O2 with LTO). It needs no NCCL or CUDA header: its nccl/
# folder has the profiler ABI. No -flto, so /opt/gcc's broken lto-wrapper does not matter; a
# failing $CXX is retried with /usr/bin/g++.
INSPECTOR_SO="$BUILD/libnccl-profiler-inspector.so"
HAVE_INSPECTOR=0
build_inspector() {
  local src="$1" meta tag="" commit="" ver cxx
  meta="$src/../../SOURCE" # build/nccl-inspector-src/SOURCE, one line of JSON
  if [[ -f "$meta" ]]; then
    tag="$(sed -n 's/.*"tag":"\([^"\\]*\)".*/\1/p' "$meta")"
    commit="$(sed -n 's/.*"commit":"\([0-9a-f]*\)".*/\1/p' "$meta")"
  fi
  ver="${tag:-unknown}${commit:+-${commit:0:12}}"
  # What the Makefile's version.cc rule writes, with the exported tag and commit (the
  # Inspector puts it in every record's metadata.git_rev).
  printf '#include "version.h"\nconst char* get_git_version_info() { return "%s"; }\n' \
    "$ver" >"$BUILD/inspector_version.cc"
  rm -f "$INSPECTOR_SO"
  for cxx in "$CXX" /usr/bin/g++; do
    command -v "$cxx" >/dev/null || continue
    log "building the NCCL Inspector ($ver) with $cxx"
    if "$cxx" -I"$src/nccl" -I"$src" -g -O3 -fPIC -shared -DNDEBUG -Wall -Wextra \
      -o "$INSPECTOR_SO" -Wl,-soname,libnccl-profiler-inspector.so "$BUILD/inspector_version.cc" \
      "$src/inspector_plugin.cc" "$src/inspector.cc" "$src/json.cc"; then
      return 0
    fi
    rm -f "$INSPECTOR_SO"
  done
  return 1
}
if [[ -f "$INSPECTOR_SRC/inspector_plugin.cc" ]]; then
  if build_inspector "$INSPECTOR_SRC"; then
    HAVE_INSPECTOR=1
  else
    log "the NCCL Inspector build failed: no inspector variants"
  fi
else
  log "no NCCL Inspector source at $INSPECTOR_SRC (bench/gpu/get_inspector_src.sh fetches it):" \
    "no inspector variants"
fi
if [[ "${BUILD_ONLY:-0}" == 1 ]]; then
  log "built: $BUILD/hostlean_allreduce $CI_SO $EMPTY_SO$( ((HAVE_INSPECTOR)) && echo " $INSPECTOR_SO")"
  exit 0
fi

HOSTLEAN="$BUILD/hostlean_allreduce"

# Environment of one variant, as NAME=VALUE words for env(1); dir is the CommInsight run's
# COMMINSIGHT_HOME or the Inspector run's NCCL_INSPECTOR_DUMP_DIR.
variant_env() {
  local v="$1" dir="$2"
  case "$v" in
    none) echo "NCCL_PROFILER_PLUGIN=none" ;;
    empty_mask70) echo "NCCL_PROFILER_PLUGIN=$EMPTY_SO COMMINSIGHT_PROFILER_EVENT_MASK=70" ;;
    empty_mask6) echo "NCCL_PROFILER_PLUGIN=$EMPTY_SO COMMINSIGHT_PROFILER_EVENT_MASK=6" ;;
    empty_mask66) echo "NCCL_PROFILER_PLUGIN=$EMPTY_SO COMMINSIGHT_PROFILER_EVENT_MASK=66" ;;
    comminsight_mask70)
      echo "NCCL_PROFILER_PLUGIN=$CI_SO COMMINSIGHT_PROFILER_EVENT_MASK=70 COMMINSIGHT_HOME=$dir" ;;
    comminsight_mask6)
      echo "NCCL_PROFILER_PLUGIN=$CI_SO COMMINSIGHT_PROFILER_EVENT_MASK=6 COMMINSIGHT_HOME=$dir" ;;
    comminsight_sampled)
      echo "NCCL_PROFILER_PLUGIN=$CI_SO COMMINSIGHT_PROFILER_EVENT_MASK=70" \
        "COMMINSIGHT_PROFILER_GPU_TIMING=sampled COMMINSIGHT_HOME=$dir" ;;
    inspector)
      echo "NCCL_PROFILER_PLUGIN=$INSPECTOR_SO NCCL_INSPECTOR_ENABLE=1" \
        "NCCL_INSPECTOR_DUMP_DIR=$dir" \
        "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=$INSPECTOR_INTERVAL_US" ;;
    *) die "unknown variant $v" ;;
  esac
}

# Which variants run (VARIANTS, space-separated), checked before anything runs.
DEFAULT_VARIANTS="none empty_mask70 comminsight_mask70 comminsight_sampled comminsight_mask6 empty_mask6"
KNOWN_VARIANTS="$DEFAULT_VARIANTS inspector empty_mask66"
((HAVE_INSPECTOR)) && DEFAULT_VARIANTS+=" inspector empty_mask66"
read -r -a RUN_VARIANTS <<<"${VARIANTS:-$DEFAULT_VARIANTS}"
((${#RUN_VARIANTS[@]} > 0)) || die "VARIANTS names no variant"
for v in "${RUN_VARIANTS[@]}"; do
  [[ " $KNOWN_VARIANTS " == *" $v "* ]] || die "unknown variant $v (known: $KNOWN_VARIANTS)"
  if [[ "$v" == inspector ]] && ((!HAVE_INSPECTOR)); then
    die "VARIANTS names inspector, but no NCCL Inspector was built (see above)"
  fi
done
[[ "$INSPECTOR_INTERVAL_US" =~ ^[0-9]+$ ]] || die "INSPECTOR_INTERVAL_US must be a number"
log "variants: ${RUN_VARIANTS[*]}"

# What an Inspector run wrote, as one JSON object for its manifest line (the report's
# --inspector-dir mode; if that fails, files/bytes/records counted here).
inspector_counts() {
  local dir="$1" s files bytes records
  s="$("$PY" "$ROOT/bench/gpu/overhead_report.py" --inspector-dir "$dir" 2>/dev/null)"
  if [[ "$s" == "{"* ]]; then
    echo "$s"
    return
  fi
  files="$(find "$dir" -type f 2>/dev/null | wc -l)"
  bytes="$(find "$dir" -type f -printf '%s\n' 2>/dev/null | awk '{n += $1} END {print n + 0}')"
  records="$(find "$dir" -type f -exec cat {} + 2>/dev/null | grep -c '^{')"
  printf '{"records":%d,"files":%d,"bytes":%d,"dir":"%s","summary_failed":true}\n' \
    "$records" "$files" "$bytes" "$dir"
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
  PROBES=(comminsight_mask70 empty_mask70)
  [[ " ${RUN_VARIANTS[*]} " == *" inspector "* ]] && PROBES+=(inspector)
  for v in "${PROBES[@]}"; do
    home="$WORK/probe_$v.home" # COMMINSIGHT_HOME, or the Inspector's dump dir
    [[ "$v" == inspector ]] && mkdir -p "$home"
    log "probe $v (NCCL_DEBUG=INFO)"
    {
      echo "==== probe $v ===="
      # shellcheck disable=SC2046
      env $(variant_env "$v" "$home") NCCL_DEBUG=INFO COMMINSIGHT_PROFILER_DEBUG=1 \
        "$HOSTLEAN" --variant "probe_$v" --rounds 1 --target-s 0.02 --sizes 8,1048576 $HOSTLEAN_ARGS 2>&1
      echo "==== rc=$? ===="
      [[ "$v" == inspector ]] && echo "==== inspector wrote: $(inspector_counts "$home") ===="
    } >>"$PROBE_LOG"
    [[ -d "$home" ]] && clean_home "$home"
  done
  log "NCCL profiler lines of the probes:"
  grep -iE "profiler|inspector|==== " "$PROBE_LOG" | grep -v '^{"bench"' | head -60 >&2
fi

# ---- 3. alternate ----
NV=${#RUN_VARIANTS[@]}
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
    v="${RUN_VARIANTS[$(((i + r) % NV))]}"
    out="$WORK/r${r}_$v.out"
    home=""
    dump=""
    [[ "$v" == comminsight_* ]] && home="$WORK/r${r}_$v.home"
    [[ "$v" == inspector ]] && dump="$WORK/r${r}_$v.dump" && mkdir -p "$dump"
    # shellcheck disable=SC2046
    env $(variant_env "$v" "${home:-$dump}") \
      "$HOSTLEAN" --variant "$v" --rounds "$INNER_ROUNDS" --target-s "$TARGET_S" \
      --sizes "$SIZES" $HOSTLEAN_ARGS >"$out" 2>&1
    rc=$?
    extra=""
    if [[ -n "$dump" ]]; then
      extra=",\"inspector\":$(inspector_counts "$dump")"
      [[ "${KEEP_HOMES:-0}" == 1 ]] || rm -rf "$dump"
    fi
    printf '{"round":%d,"variant":"%s","out":"%s","home":%s,"rc":%d%s}\n' "$r" "$v" "$out" \
      "$([[ -n "$home" ]] && echo "\"$home\"" || echo null)" "$rc" "$extra" >>"$MANIFEST"
    log "round $r $v rc=$rc ($((SECONDS - t_start))s): $(grep -o '"size":"[^"]*"\|"us_per_iter":[0-9.]*' "$out" | paste -sd' ' | sed 's/"size"://g; s/"us_per_iter"://g')$(
      [[ -n "$extra" ]] && echo "; inspector records=$(grep -o '"records":[0-9]*' <<<"$extra" | head -1 | cut -d: -f2)")"
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
