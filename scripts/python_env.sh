# Sourced by scripts/deps.sh, demo.sh and test.sh: picks the Python
# interpreter for the Python tests and the demo's numpy column, makes sure
# it has numpy and pytest, and exports it as $PYTHON.
#
# $PYTHON when set, else the python3 first on PATH. Debian's own interpreter
# is externally managed (PEP 668: pip refuses to install into it), so it
# gets python3-numpy and python3-pytest from apt. Any other interpreter
# gets them from pip; where pip refuses, a virtual environment under
# build/venv gets them and becomes $PYTHON.

tj_sudo() {
  if [ "$(id -u)" -ne 0 ]; then sudo "$@"; else "$@"; fi
}

tj_python_ok() {  # interpreter
  "$1" -c "import numpy, pytest" 2>/dev/null
}

tj_python_is_debian() {  # interpreter: true for Debian's own python3
  local real
  real=$(realpath "$1") || return 1
  case "$real" in
    /usr/bin/python3*) dpkg -S "$real" >/dev/null 2>&1 ;;
    *) return 1 ;;
  esac
}

tj_pick_python() {
  local py
  py=$(command -v "${PYTHON:-python3}") || {
    echo "deps: no Python interpreter '${PYTHON:-python3}'" >&2
    return 1
  }
  local venv="$PWD/build/venv"
  if tj_python_ok "$py"; then
    :
  elif [ -z "${PYTHON:-}" ] && [ -x "$venv/bin/python" ] &&
       tj_python_ok "$venv/bin/python"; then
    py="$venv/bin/python"
  elif tj_python_is_debian "$py"; then
    echo "deps: installing python3-numpy python3-pytest (Debian's $py)"
    tj_sudo apt-get update -q &&
      DEBIAN_FRONTEND=noninteractive tj_sudo apt-get install -y -q \
        python3-numpy python3-pytest || return 1
  elif ! "$py" -m pip install -q numpy pytest; then
    echo "deps: pip refused for $py; using a virtual environment in $venv"
    mkdir -p "$PWD/build" &&
      "$py" -m venv "$venv" &&
      "$venv/bin/python" -m pip install -q numpy pytest || return 1
    py="$venv/bin/python"
  fi
  tj_python_ok "$py" || {
    echo "deps: $py still lacks numpy or pytest" >&2
    return 1
  }
  PYTHON=$py
  export PYTHON
}
