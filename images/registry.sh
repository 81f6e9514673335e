#!/usr/bin/env bash
# A container registry on loopback (the Distribution registry, Debian's docker-registry package) for pushing and
# pulling the images where no remote registry is reachable: CI and the in-image tests.
#   usage: images/registry.sh start|stop|status [PORT] [DIR]    default port 5000, DIR a scratch folder
# Binds 127.0.0.1 only. Push with `podman push --tls-verify=false` (plain HTTP on loopback).
set -euo pipefail
cmd="${1:-start}"; port="${2:-5000}"; dir="${3:-${TMPDIR:-/tmp}/slipway-registry-$port}"
case "$cmd" in
start)
    if curl -fs "http://127.0.0.1:$port/v2/" >/dev/null 2>&1; then echo "127.0.0.1:$port"; exit 0; fi
    command -v docker-registry >/dev/null || { echo "registry.sh: docker-registry is missing: apt-get install docker-registry" >&2; exit 1; }
    mkdir -p "$dir/data"
    printf 'version: 0.1\nlog: {level: warn}\nstorage: {filesystem: {rootdirectory: %s/data}, delete: {enabled: true}}\nhttp: {addr: 127.0.0.1:%s}\n' \
        "$dir" "$port" > "$dir/config.yml"
    nohup docker-registry serve "$dir/config.yml" > "$dir/registry.log" 2>&1 &
    echo $! > "$dir/registry.pid"
    for _ in $(seq 100); do
        curl -fs "http://127.0.0.1:$port/v2/" >/dev/null 2>&1 && { echo "127.0.0.1:$port"; exit 0; }
        kill -0 "$(cat "$dir/registry.pid")" 2>/dev/null || break
        sleep 0.1
    done
    echo "registry.sh: the registry did not start on 127.0.0.1:$port: $(tail -n 1 "$dir/registry.log")" >&2; exit 1;;
stop)
    [ -f "$dir/registry.pid" ] && kill "$(cat "$dir/registry.pid")" 2>/dev/null; rm -f "$dir/registry.pid";;
status)
    curl -fs "http://127.0.0.1:$port/v2/" >/dev/null && echo "127.0.0.1:$port up" || { echo "127.0.0.1:$port down"; exit 1; };;
*) echo "usage: images/registry.sh start|stop|status [PORT] [DIR]" >&2; exit 2;;
esac
