#!/usr/bin/env bash
# The quick loop at the LOWEST versions pyproject.toml declares (each ">=X" installed as "==X", for
# the core dependencies and the fit and test extras), in a throwaway virtualenv: a floor that does
# not work is a false promise to a user whose resolver picks it. Packages the floors do not name
# (click under typer, ...) come at the newest release pip pairs with them, as they would for a user.
# torch is the exception: the README's torch==2.13.0 (PyPI has no CPU-only wheel of torch 2.1).
# Exit status is the suite's.
#   bash scripts/check_floors.sh            (extra pytest arguments go after it)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(mktemp -d)
trap 'rm -rf "$venv"' EXIT
python3 -m venv "$venv"
floors=$(python3 - <<'PY'
import re, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
specs = project["dependencies"] + project["optional-dependencies"]["fit"] + project["optional-dependencies"]["test"]
pins = {}
for spec in specs:
    name, _, floor = re.fullmatch(r"([A-Za-z0-9_.-]+)(>=([0-9][^,;\s]*))?", spec.strip()).groups()
    if name.lower() != "torch":
        pins[name.lower()] = f"{name}=={floor}" if floor else name
print(" ".join(sorted(pins.values())))
PY
)
echo "+ floors: $floors"
"$venv/bin/pip" install -q torch==2.13.0
"$venv/bin/pip" install -q $floors
"$venv/bin/pip" install -q --no-deps -e .
"$venv/bin/pip" freeze --exclude-editable | grep -iE '^(typer|click|rich|pyyaml|numpy|pandas|scikit-learn|scipy|boto3|matplotlib|transformers|hypothesis|pytest|jsonschema)==' | tr '\n' ' '
echo
"$venv/bin/python" -m pytest -q -m "not slow" -p no:cacheprovider "$@"
