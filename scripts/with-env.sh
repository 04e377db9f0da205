#!/usr/bin/env bash
# Run a command inside the project's pinned environment, creating it on first use.
#   bash scripts/with-env.sh python examples/pdd_cluster.py
#   bash scripts/with-env.sh python -m pytest -q tests
# Installs Debian's libibverbs1/librdmacm1/libnuma1 (needed by Mooncake) when missing, builds or
# reuses the pinned virtualenv (scripts/env.sh), installs this checkout into it, then runs.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
missing=()
for lib in libibverbs.so.1 librdmacm.so.1 libnuma.so.1; do
  ldconfig -p | grep -q "$lib" || missing+=("$lib")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "[with-env] installing Debian packages for Mooncake (${missing[*]} missing)" >&2
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq \
    libibverbs1 librdmacm1 libnuma1 >&2
fi
venv="$(bash "$repo/scripts/env.sh")"
# Editable install with the CPU extra (the CPU-only Mooncake wheel, already pinned in the env):
# SGLang discovers the plugin through its entry point in the venv.
"$venv/bin/pip" install -q --no-build-isolation -e "$repo[cpu]" >/dev/null 2>&1 \
  || "$venv/bin/pip" install --no-build-isolation -e "$repo[cpu]" >&2
export PATH="$venv/bin:$PATH" VIRTUAL_ENV="$venv"
cd "$repo"
exec "$@"
