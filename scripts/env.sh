#!/usr/bin/env bash
# Build (or reuse) the Python environment pinned by scripts/requirements.txt and print its path.
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
  log="$root/install.log"
  # pip is chatty about the machine's local indexes; keep its output in a log, show it on failure.
  if ! { "$venv/bin/pip" install --upgrade pip && "$venv/bin/pip" install -r "$here/requirements.txt"; } >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "[env] pip install failed; full log: $log" >&2
    exit 1
  fi
  touch "$venv/.complete"
else
  echo "[env] reusing $venv" >&2
fi
echo "$venv"
