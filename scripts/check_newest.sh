#!/usr/bin/env bash
# The quick loop against the newest releases of every dependency (no lock), in a throwaway
# virtualenv: run it before scripts/update_lock.sh, or on a schedule, so an upstream release that
# breaks srift is seen here before a user sees it. Exit status is the suite's (then mypy's).
#   bash scripts/check_newest.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/fresh_venv.sh --upgrade
"$venv/bin/pip" freeze --exclude-editable | grep -iE '^(pyyaml|typer|rich|numpy|pandas|scikit-learn|boto3|transformers|hypothesis|pytest|mypy)==' || true
"$venv/bin/python" -m pytest -q -m "not slow" -n 2 --dist loadgroup -p no:cacheprovider
"$venv/bin/mypy" srift
