# shellcheck shell=bash
# What the .ci scripts share, defined once: sourced (`. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"`), functions only,
# nothing runs at source time. Messages start with "$LOG_NAME: " (a script sets it; default its own file name).
# Not sourced by .ci/horovod-wheel: the runtime image's build copies that script alone (images/runtime/Dockerfile).

# --- messages --------------------------------------------------------------------------------------------------------

say() { echo "${LOG_NAME:-${0##*/}}: $*" >&2; }  # say MESSAGE: one line on stderr, after the script's name

die() { say "$@"; exit 1; }

have() { command -v "$1" >/dev/null 2>&1; }  # have COMMAND: whether it is on PATH

# --- where things are ------------------------------------------------------------------------------------------------

ci_root() { (cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd); }  # the repository's root

slipway_cache() { echo "${SLIPWAY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/slipway}"; }  # the project's cache folder

base_python() {  # the interpreter the environments are made from: $SLIPWAY_PYTHON, python3.11, else python3
    local python="${SLIPWAY_PYTHON:-python3.11}"
    have "$python" || python=python3
    echo "$python"
}

project_uv() {  # the project environment's uv ($SLIPWAY_UV overrides), or fail saying to run .ci/setup
    local uv="${SLIPWAY_UV:-$(ci_root)/.venv/bin/uv}"
    [ -x "$uv" ] || die "no uv at $uv (run bash .ci/setup first)"
    echo "$uv"
}

# --- content hashes and caches ---------------------------------------------------------------------------------------

content_hash() { cat "$@" | sha256sum | cut -d' ' -f1; }  # content_hash FILE...: sha256 of the files, in order

cache_key() { content_hash "$@" | cut -c1-16; }  # cache_key FILE...: the folder name of a cached build of them

stamp_matches() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }  # stamp_matches FILE VALUE: FILE holds exactly VALUE

prune_except() {  # prune_except FOLDER NAME: remove everything in FOLDER but NAME (older builds of other hashes)
    find "$1" -mindepth 1 -maxdepth 1 ! -name "$2" -exec rm -rf {} +
}

# --- packages --------------------------------------------------------------------------------------------------------

apt_install() {  # apt_install [--recommends] SPEC...: install from Debian the packages whose SPEC is missing
    # SPEC is COMMAND:PACKAGE, /PATH:PACKAGE (a package that puts nothing on PATH) or PACKAGE (its command's name).
    # As root, or with sudo that asks no password; otherwise it says what to install and fails.
    local recommends=(--no-install-recommends) spec what missing=() sudo=()
    if [ "${1:-}" = --recommends ]; then recommends=(); shift; fi
    for spec in "$@"; do
        what="${spec%%:*}"
        if [[ "$what" == /* ]]; then [ -e "$what" ] || missing+=("${spec##*:}")
        else have "$what" || missing+=("${spec##*:}"); fi
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" != 0 ]; then
        if have sudo && sudo -n true 2>/dev/null; then sudo=(sudo)
        else say "missing ${missing[*]}: install them (sudo apt-get install ${missing[*]}) and run again"; return 1; fi
    fi
    say "installing ${missing[*]} from Debian"
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${recommends[@]}" "${missing[@]}" >/dev/null
}

# --- network ---------------------------------------------------------------------------------------------------------

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

http_ok() { python3 -c 'import sys, urllib.request as u; u.urlopen(sys.argv[1], timeout=10)' "$1" 2>/dev/null; }

# --- stages ----------------------------------------------------------------------------------------------------------

stage() {  # stage [KEY [TITLE]]: end the running stage (its seconds: a line, and STAGE_SPENT[KEY]), start KEY
    # The lines go to stdout, or to the descriptor STAGE_FD names. STAGE_DISK=1: the end line adds the free disk (a
    # full disk fails far from the cause); STAGE_ANNOUNCE=1: a line at each start too, with TITLE.
    declare -gA STAGE_SPENT
    if [ -n "${STAGE_KEY:-}" ]; then
        STAGE_SPENT[$STAGE_KEY]=$((SECONDS - STAGE_STARTED))
        local line="== $STAGE_KEY: ${STAGE_SPENT[$STAGE_KEY]} s"
        [ "${STAGE_DISK:-0}" = 1 ] && line="$line ($(df -Pm . | awk 'NR == 2 {print $4}') MiB free)"
        echo "$line" >&"${STAGE_FD:-1}"
    fi
    STAGE_KEY="${1:-}" STAGE_STARTED=$SECONDS
    if [ -n "$STAGE_KEY" ] && [ "${STAGE_ANNOUNCE:-0}" = 1 ]; then
        echo "== $STAGE_KEY${2:+ ($2)}" >&"${STAGE_FD:-1}"
    fi
    return 0
}

# --- Go --------------------------------------------------------------------------------------------------------------

go_env() {  # the environment of every go command here: the lock as it is, this Go, static binaries
    export GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=local CGO_ENABLED=0
}

go_module_dir() {  # go_module_dir MODULE: its folder in Go's module cache at the version the current module pins
    # Downloaded when missing: built programs are cached apart from Go's module cache, and a machine may keep the
    # one and have lost the other (`go list -m` then prints an empty folder, not an error).
    local dir
    dir="$(go_env; go mod download -json "$1" \
        | python3 -c 'import json, sys; print(json.load(sys.stdin).get("Dir", ""))')" || die "go mod download $1 failed"
    [ -d "$dir" ] || die "no folder for $1 in Go's module cache after go mod download"
    echo "$dir"
}
