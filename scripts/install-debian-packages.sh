#!/usr/bin/env bash
# Install the Debian packages the build and tests need (CI runs this; so can developers).
# Only packages from scripts/debian-packages.txt; already-installed ones are skipped, so the
# script is cheap when nothing is missing. Needs root (or sudo) only when something is missing.
set -euo pipefail
cd "$(dirname "$0")"
mapfile -t wanted < <(grep -v '^\s*#' debian-packages.txt | awk 'NF {print $1}')
missing=()
for pkg in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "debian packages: all present (${wanted[*]})"
  exit 0
fi
echo "debian packages: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
