#!/usr/bin/env bash
# Build (or reuse) the Python environment pinned by .ci/requirements.txt and print its path.
# The environment is keyed by a hash of the pins, so it is reused across runs and rebuilt only
# when a pin changes; older keyed environments are deleted so that at most one stays on disk.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${SGLANG_PDD_ENV_ROOT:-$HOME/.cache/sglang-pdd}"
key="$(sha256sum "$here/requirements.txt" | cut -c1-16)"
venv="$root/venv-$key"
mkdir -p "$root"
if [ ! -f "$venv/.complete" ]; then
  for old in "$root"/venv-*; do
    [ -e "$old" ] && [ "$old" != "$venv" ] && rm -rf "$old"
  done
  rm -rf "$venv"
  echo "[env] building $venv (about 5 minutes)" >&2
  python3.11 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip >&2
  "$venv/bin/pip" install -q -r "$here/requirements.txt" >&2
  touch "$venv/.complete"
else
  echo "[env] reusing $venv" >&2
fi
echo "$venv"
