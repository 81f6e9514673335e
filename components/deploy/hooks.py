"""What `slipway run` checks of deploy's arguments before any step runs (the spec's preflight hook): the model's
name, where its versions are pushed, how it is served and the model registry."""

from __future__ import annotations

from typing import Any

from slipway.core.errors import SlipwayError


def check(run: Any) -> None:
    """Complete and check deploy's arguments: model_name (default: the data's name), model_base (default: the
    workdir's serving/NAME), deploy_backend (default: local, push with --runner podman)."""
    from slipway.serving.layout import check_model_name

    values = run.values
    values["model_name"] = check_model_name(values["model_name"], run.flag("model_name"))
    values["model_base"] = values["model_base"] or str(run.workdir / "serving" / values["model_name"])
    deploy = run.given.get("deploy_backend") or ("push" if run.runner == "podman" else "local")
    values["deploy_backend"] = deploy
    if run.runner == "podman" and deploy == "local":
        raise SlipwayError("--deploy local starts a model server beside the step, which the runtime image has "
                           "not: with --runner podman use --deploy push and serve with the serving image")
    if values["keep_serving"] and deploy != "local":
        raise SlipwayError("--keep-serving: needs --deploy local")
    if not 0 <= values["serving_port"] <= 65535:
        raise SlipwayError(f"--port {values['serving_port']}: expected 0 (any free port) to 65535")
    values["model_registry"] = _model_registry(run)


def _model_registry(run: Any) -> str:
    """--model-registry asked once now: a malformed or silent address fails in one line before any step, not in
    deploy after the training (deploy and resolve_baseline ask again, as on a cluster)."""
    address = run.values["model_registry"]
    if not address:
        return ""
    from slipway.core import errors
    from slipway.core.lineage import model_registry

    try:
        return model_registry.connect(address, timeout=10.0).address
    except SlipwayError as exc:
        raise errors.prefixed(run.flag("model_registry"), exc) from None
