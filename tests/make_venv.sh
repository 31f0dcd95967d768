#!/usr/bin/env bash
# `make install`: the project's virtualenv (.venv) with cardgen editable, its test dependencies and vLLM's CPU build
# (tests/engines/install_vllm.sh), made from a per-machine copy of those dependencies instead of installing them
# again in every clone.
#
#   bash tests/make_venv.sh            # cardgen and its test dependencies (`make install`)
#   bash tests/make_venv.sh --engine   # and vLLM's CPU build (`make install-engine`, for `make test`)
#   VENV=... for another place, PY=... for another interpreter
#
# The dependencies live in $CARDGEN_CACHE (default ~/.cache/cardgen)/venv-KEY, where KEY is a hash of what decides
# them: pyproject.toml's dependency lists and build backend, the interpreter's version and, with --engine,
# install_vllm.sh. A change to any of them makes a new one (about 1.5 minutes on two cores, 3 more with the
# engine); otherwise a clone's .venv is a hard-linked copy of it (seconds), its scripts pointed at itself, and
# cardgen installed into it editable. A .venv that already holds the engine's set serves `make install` too.
# Nothing in the copy is written in place: pip and Python replace files, so the shared copy stays as built.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
venv="${VENV:-$root/.venv}"
case "$venv" in /*) ;; *) venv="$root/$venv" ;; esac
py="${PY:-python3}"
cache="${CARDGEN_CACHE:-$HOME/.cache/cardgen}"
start=$SECONDS

quiet() {  # pip's note on each requirement the second local index does not hold is noise
  { grep -v "is ignored: it is neither a file nor a directory" || true; } >&2
}

# What decides the dependencies, one requirement a line (the build backend too: cardgen is installed without
# build isolation).
requirements() {
  "$py" - "$root/pyproject.toml" <<'EOF'
import sys
import tomllib

with open(sys.argv[1], "rb") as fh:
    data = tomllib.load(fh)
project = data["project"]
# editables: what hatchling's editable build of cardgen needs (it asks for it at build time)
wanted = [*project["dependencies"], *project["optional-dependencies"]["test"], *data["build-system"]["requires"],
          "editables"]
print("\n".join(sorted(set(wanted))))
EOF
}

engine=0
[[ "${1:-}" == "--engine" ]] && engine=1
reqs="$(requirements)"
key="$({ echo "$reqs"; "$py" -VV; } | sha256sum | cut -c1-12)"
if ((engine)); then
  key="$key-engine-$(sha256sum <"$here/engines/install_vllm.sh" | cut -c1-8)"
fi
deps="$cache/venv-$key"
have="$(cat "$venv/.deps-key" 2>/dev/null || true)"
# a .venv that holds this set (or, for `make install`, the engine's set over it) is kept as it is
if [[ -x "$venv/bin/python" && ( "$have" == "$key" || ( $engine == 0 && "$have" == "$key"-engine-* ) ) ]]; then
  echo "make_venv: $venv holds its dependencies ($have)" >&2
else
  if [[ ! -f "$deps/.complete" ]]; then
    mkdir -p "$cache"
    exec 9>"$deps.lock"
    flock 9  # another clone making the same one: wait for it
    if [[ ! -f "$deps/.complete" ]]; then
      echo "make_venv: the dependencies ($key) are not on this machine yet: installing them into $deps" >&2
      rm -rf "$deps"
      "$py" -m venv "$deps"
      "$deps/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip 2>&1 | quiet
      mapfile -t wanted <<<"$reqs"
      "$deps/bin/python" -m pip install -q --disable-pip-version-check "${wanted[@]}" 2>&1 | quiet
      if ((engine)); then
        VENV="$deps" bash "$here/engines/install_vllm.sh" 2>&1 | quiet
      fi
      touch "$deps/.complete"
    fi
    exec 9>&-
  fi

  rm -rf "$venv"
  # hard links where the cache and the checkout share a file system, a copy where they do not
  cp -al "$deps" "$venv" 2>/dev/null || { rm -rf "$venv"; cp -a "$deps" "$venv"; }
  rm -f "$venv/.complete"
  # the scripts name the interpreter they were installed with: this virtualenv's, not the cache's
  for script in "$venv"/bin/*; do
    # text files only (grep -I passes over binaries); sed -i writes a new file: the cache's link is untouched
    if [[ -f "$script" && ! -L "$script" ]] && grep -qIF "$deps" "$script"; then
      sed -i "s|$deps|$venv|g" "$script"
    fi
  done
  echo "$key" >"$venv/.deps-key"
  echo "make_venv: $venv made in $((SECONDS - start)) s (dependencies $key from $cache)" >&2
fi

"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e "$root"
