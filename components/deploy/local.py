"""The deploy component's local backend: KServe's own model server on loopback, for a model base on this machine.

A server already serving the base (kept from an earlier run, or `slipway serve`: it leaves a state file beside the
base) is reused: it picks up the new version by itself, without dropping a request. Otherwise a server is started
for the step and stopped at its end, unless keep_serving (then it runs on, detached, until stopped).
"""

from __future__ import annotations

from slipway.components.deploy import smoke
from slipway.core.errors import SlipwayError
from slipway.serving import layout, process

VERSION_TIMEOUT_S = 120.0


def deploy(name: str, base: str, version: int, model_dir: str, examples: list[bytes], port: int,
           keep_serving: bool) -> dict:
    """Serve `version` of base on loopback, smoke-test it, roll back on failure; the deployment record's fields."""
    state = layout.server_state_file(base)
    server = process.read_state(state) if state else None
    ours = server is None
    if server is not None:
        print(f"deploy: {name} is already served at {server.url}; it picks up version {version}", flush=True)
        process.wait_for_version(server.url, name, version, VERSION_TIMEOUT_S)
    else:
        log_file = f"{base.rstrip('/')}.server.log" if state else None
        server = process.start_server(base, name, port=port, detach=keep_serving, log_file=log_file,
                                      state_file=state)
        process.wait_for_version(server.url, name, version, VERSION_TIMEOUT_S)
    stop_after = ours and not keep_serving
    try:
        result = smoke.run(server.url, name, smoke.LocalModel(model_dir), examples)
    except smoke.SmokeFailed as exc:
        rolled_back = _roll_back(name, base, version, str(exc), server, ours)
        raise SlipwayError(f"smoke request to {server.url} failed: {exc}; rolled back: {rolled_back}") from None
    finally:
        if stop_after and server.alive():
            server.stop()
    print(f"deploy: {name} version {version} served at {server.url}: smoke request {result.describe()}", flush=True)
    serving = not stop_after
    if not serving:
        print(f"deploy: stopped the server (keep_serving is off); `slipway serve {base}` serves it again", flush=True)
    return {
        "status": "deployed",
        "endpoint": server.url,
        "predict_url": f"{server.url}/v1/models/{name}:predict",
        "serving": serving,
        "server_pid": server.pid if serving else None,
        "server_state_file": state if serving else None,
        "smoke": {"rows": result.rows, "signatures": result.signatures, "max_difference": result.max_difference},
        "prediction": result.first_prediction,
        "reason": f"version {version} answered {result.describe()}",
    }


def _roll_back(name: str, base: str, version: int, reason: str, server: process.ServerProcess, ours: bool) -> str:
    """Move the rejected version out of the base; the server falls back to the newest remaining one."""
    moved_to = layout.retire(base, version, reason)
    previous = layout.latest_version(base)
    if previous is None:
        if ours and server.alive():
            server.stop()
        return f"version {version} moved to {moved_to}; no earlier version to serve"
    try:
        process.wait_for_version(server.url, name, previous, VERSION_TIMEOUT_S)
    except SlipwayError as exc:
        return f"version {version} moved to {moved_to}; the server did not return to version {previous} ({exc})"
    return f"version {version} moved to {moved_to}; serving version {previous} again"
