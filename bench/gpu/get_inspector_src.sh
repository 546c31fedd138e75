#!/usr/bin/env bash
# Fetches the source of NVIDIA's NCCL Inspector profiler plugin (ext-profiler/inspector of the
# NCCL repository) into build/nccl-inspector-src/, for bench/gpu/run_overhead.sh's `inspector`
# variant. NCCL's code is not part of this repository: it is exported here, under the
# gitignored build/, and carried to the GPU machine (which has no network) from there.
#
#   bash bench/gpu/get_inspector_src.sh [TAG]
#
# TAG (or INSPECTOR_TAG): the NCCL tag to export, v2.28.9-1 by default (the NCCL of the GPU
# machine's nvidia-nccl-cu13 wheel; the plugin must speak that NCCL's profiler ABI).
# NCCL_GIT: a local NCCL git repository (bare or not; /work/.mirror/NVIDIA+nccl/repo by
# default), or a URL (https://github.com/NVIDIA/nccl), which is cloned with --depth 1 at TAG.
# Result: build/nccl-inspector-src/ext-profiler/inspector/ (plus NCCL's LICENSE.txt) and
# build/nccl-inspector-src/SOURCE, one line of JSON: {"repo","tag","commit","path","exported_utc"}.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TAG="${1:-${INSPECTOR_TAG:-v2.28.9-1}}"
NCCL_GIT="${NCCL_GIT:-/work/.mirror/NVIDIA+nccl/repo}"
DEST="${INSPECTOR_DEST:-$ROOT/build/nccl-inspector-src}"
SUBDIR="ext-profiler/inspector"

log() { echo "[get_inspector_src] $*" >&2; }

tmp=""
cleanup() { [[ -n "$tmp" ]] && rm -rf "$tmp"; }
trap cleanup EXIT

case "$NCCL_GIT" in
  http://* | https://* | git@* | ssh://* | git://*)
    tmp="$(mktemp -d /tmp/nccl_git.XXXXXX)"
    log "cloning $NCCL_GIT at $TAG (depth 1)"
    git clone --quiet --depth 1 --branch "$TAG" "$NCCL_GIT" "$tmp/nccl"
    repo="$tmp/nccl"
    ;;
  *)
    [[ -d "$NCCL_GIT" ]] || { log "ERROR: no git repository at $NCCL_GIT (set NCCL_GIT)"; exit 1; }
    repo="$NCCL_GIT"
    ;;
esac

commit="$(git -C "$repo" rev-parse --verify "$TAG^{commit}")" ||
  { log "ERROR: $NCCL_GIT has no $TAG"; exit 1; }
git -C "$repo" cat-file -e "$commit:$SUBDIR" 2>/dev/null ||
  { log "ERROR: $TAG ($commit) has no $SUBDIR"; exit 1; }

rm -rf "$DEST"
mkdir -p "$DEST"
# LICENSE.txt travels with the code it licenses (NCCL's BSD-3-Clause terms).
paths=("$SUBDIR")
git -C "$repo" cat-file -e "$commit:LICENSE.txt" 2>/dev/null && paths+=(LICENSE.txt)
git -C "$repo" archive --format=tar "$commit" "${paths[@]}" | tar -x -C "$DEST"

printf '{"repo":"%s","tag":"%s","commit":"%s","path":"%s","exported_utc":"%s"}\n' \
  "$NCCL_GIT" "$TAG" "$commit" "$SUBDIR" "$(date -u +%FT%TZ)" >"$DEST/SOURCE"
log "exported $SUBDIR of $TAG ($commit) into $DEST ($(find "$DEST/$SUBDIR" -type f | wc -l) files)"
cat "$DEST/SOURCE"
