# Sourced by scripts/update_lock.sh and scripts/check_newest.sh: a throwaway virtualenv in $venv with the
# CPU build of torch and srift's test extra at the newest releases (never an unpinned torch: that is a
# CUDA build of several GB). Extra pip flags go in "$@". Removed when the calling script exits.
venv=$(mktemp -d)
trap 'rm -rf "$venv"' EXIT
python3 -m venv "$venv"
"$venv/bin/pip" install -q torch==2.13.0
"$venv/bin/pip" install -q "$@" -e '.[test]'
