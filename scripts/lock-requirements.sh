#!/usr/bin/env bash
# Re-pin requirements/*.txt from the direct dependencies in requirements/*.in.
# Run after changing a .in file; commit the resulting .txt files.
set -euo pipefail
cd "$(dirname "$0")/../requirements"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/rt"
"$tmp/rt/bin/pip" install -q -r runtime.in
{ echo "# Generated from runtime.in by scripts/lock-requirements.sh: pip install -r runtime.in && pip freeze"
  "$tmp/rt/bin/pip" freeze; } > runtime.txt
python3 -m venv "$tmp/dev"
"$tmp/dev/bin/pip" install -q -r dev.in
{ echo "# Generated from dev.in by scripts/lock-requirements.sh: pip install -r dev.in && pip freeze --all"
  "$tmp/dev/bin/pip" freeze --all | grep -v '^pip=='; } > dev.txt
