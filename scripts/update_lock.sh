#!/usr/bin/env bash
# Rewrite test-constraints.txt, the lock of the test environment that the README's test command and
# .ci/run install with (`pip install -c test-constraints.txt -e '.[test]'`), from the newest releases
# that the README's install resolves today. Run it on purpose, then run the suite and commit the lock
# with the result: CI never picks up a new upstream release by itself.
#   bash scripts/update_lock.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/fresh_venv.sh
{
  echo "# Lock of the test environment (pip constraints), written by scripts/update_lock.sh on $(date -u +%Y-%m-%d)"
  echo "# with $("$venv/bin/python" --version) on $(uname -m). Used by the README's test command and .ci/run."
  # --all keeps setuptools (torch requires it); torch's local label (+cpu) is dropped: ==2.13.0 admits the CPU build the README installs first.
  "$venv/bin/pip" freeze --all --exclude-editable | grep -v -E "^(pip|wheel)==" | sed -E 's/^(torch==[^+]+)\+.*/\1/' | sort -f
} > test-constraints.txt.new
mv test-constraints.txt.new test-constraints.txt
echo "wrote test-constraints.txt ($(grep -vc '^#' test-constraints.txt) packages); run the suite before committing it"
