#!/usr/bin/env bash
# Installs the Debian packages of a list (default deps/debian-packages.txt; scripts/fuzz.sh passes
# deps/fuzz-packages.txt) that are missing (needs root and apt). Idempotent: does nothing when
# everything is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t pkgs < <(awk '!/^#/ && NF >= 2 {print $2}' "${1:-deps/debian-packages.txt}")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${missing[*]}" >&2
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
