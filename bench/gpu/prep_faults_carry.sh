#!/usr/bin/env bash
# Run here (dev machine) before bench/gpu/run_faults.sh goes to the device: makes what that
# device call carries, all under build/ (ignored by git):
#   build/gpu-faults/comminsight_inject-*.whl   Inject, fresh from `make build-inject`
#   build/agent-src/                            the Agent's sources: comminsight/,
#                                               generated/python/ and generated/c/include/
#                                               at AGENT_REF (default HEAD;
#                                               AGENT_REF=worktree: the working tree as is)
#   build/agent-wheels/                         the Agent's runtime wheels for the device's
#                                               CPython 3.12 on x86-64 Linux (pip download of
#                                               requirements/runtime.txt; kept once there,
#                                               REFRESH_WHEELS=1 downloads again)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
make --no-print-directory build-inject
mkdir -p build/gpu-faults
rm -f build/gpu-faults/comminsight_inject-*.whl
cp dist/comminsight_inject-*.whl build/gpu-faults/
rm -rf build/agent-src
mkdir -p build/agent-src
if [[ "${AGENT_REF:-HEAD}" == worktree ]]; then
  # the working tree as it is (uncommitted Agent changes included), without ignored files
  git ls-files -z --cached --others --exclude-standard comminsight generated/python \
    generated/c/include |
    while IFS= read -r -d '' f; do if [[ -e "$f" ]]; then printf '%s\0' "$f"; fi; done |
    tar --null -T - -c | tar -x -C build/agent-src
else
  git archive "${AGENT_REF:-HEAD}" comminsight generated/python generated/c/include |
    tar -x -C build/agent-src
fi
if [[ -n "${REFRESH_WHEELS:-}" ]] || ! ls build/agent-wheels/*.whl >/dev/null 2>&1; then
  rm -rf build/agent-wheels
  # requirements/runtime.txt is a full freeze: every dependency is pinned there
  .venv/bin/python -m pip download --quiet --disable-pip-version-check --dest build/agent-wheels \
    --only-binary=:all: --no-deps --implementation cp --python-version 3.12 \
    --abi cp312 --abi abi3 --abi none \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -r requirements/runtime.txt
fi
du -sh build/gpu-faults build/agent-src build/agent-wheels
du -shc build/gpu-faults build/agent-src build/agent-wheels | tail -1
