#!/usr/bin/env bash
# Install size and time of the package in a fresh virtual environment (docs/performance.md,
# "Member install"). Usage: benchmarks/install_size.sh [GIT_REF] [EXTRAS], e.g.
#   benchmarks/install_size.sh HEAD            # the member install: pip install cdk-gpu-governance
#   benchmarks/install_size.sh HEAD '[cdk]'    # the platform install
# Downloads from PyPI without pip's cache, so the time includes the downloads.
set -euo pipefail
ref=${1:-HEAD}; extras=${2:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git archive "$ref" | tar -x -C "$work" --one-top-level=src
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --upgrade pip
empty=$(du -sk "$work/venv" | cut -f1)
start=$(date +%s.%N)
"$work/venv/bin/pip" install --quiet --no-cache-dir "$work/src$extras"
end=$(date +%s.%N)
full=$(du -sk "$work/venv" | cut -f1)
echo "ref $ref extras '${extras}': $(python3 -c "print(f'{$end - $start:.0f}')") s, $(( (full - empty) / 1024 )) MB added to the venv," \
     "$(( $("$work/venv/bin/pip" list 2>/dev/null | wc -l) - 2 )) distributions"
