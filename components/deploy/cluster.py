"""The deploy component's kubernetes backend: a KServe InferenceService through the shared launcher, the smoke
request to its URL, and the version retired from the model base when the smoke request fails.

The object, its settings and the apply / wait / roll back logic are in inference_service.py; this module wires the
step's model, eval rows and model base to it.
"""

from __future__ import annotations

import os
import time

from slipway.components.deploy import inference_service, smoke
from slipway.core.kube import launcher
from slipway.serving import layout

SMOKE_RETRY_SECONDS = 1.0


def deploy(name: str, model_base: str, push_base: str, version: int, model_dir: str, examples: list[bytes],
           settings: inference_service.ServingSettings, run_id: str, work_dir: str, client=None,
           poll: launcher.Poll | None = None) -> dict:
    """Serve `version` of model_base as InferenceService `name`; the deployment record's fields."""
    if client is None:
        from slipway.core.kube.client import KubeClient

        client = KubeClient()
    namespace = inference_service.namespace(settings)
    existing = client.get(inference_service.KSERVE_INFERENCE_SERVICE.ref(namespace, name))
    body = inference_service.render(name, namespace, model_base, version, settings, run_id=run_id,
                                    existing=existing)
    print(f"deploy: InferenceService {namespace}/{name} -> version {version} "
          f"({inference_service.rollout(body, settings)})", flush=True)
    if inference_service.traffic_note(body, settings):
        print(f"deploy: {inference_service.traffic_note(body, settings)}", flush=True)
    model = smoke.LocalModel(model_dir)
    checked: list[smoke.SmokeResult] = []

    def smoke_request(url: str) -> None:
        checked.append(_smoke_once_served(url, name, model, examples, version, settings.timeout_s))

    def retire() -> None:  # before the previous spec returns: its new pods must not load this version
        layout.retire(push_base, version, "smoke request failed")

    reference = os.path.join(work_dir, f"{name}.inferenceservice.ref.json")
    result = inference_service.deploy(body, client, reference, settings, smoke_request, poll=poll,
                                      before_rollback=retire)
    answer = checked[-1]
    where = result["url"] if result["smoke_url"] == result["url"] else \
        f"{result['url']} (smoke request sent to {result['smoke_url']})"
    print(f"deploy: {name} version {version} {result['status']} at {where}: smoke request {answer.describe()}",
          flush=True)
    if result["traffic"]:
        print(f"deploy: {result['traffic']}", flush=True)
    return {
        "status": result["status"],
        "endpoint": result["url"],
        "predict_url": f"{result['url']}/v1/models/{name}:predict",
        "smoke_url": result["smoke_url"],
        "rollout": result["rollout"],
        "traffic": result["traffic"],
        "inference_service": f"{namespace}/{name}",
        "serving": True,
        "smoke": {"rows": answer.rows, "signatures": answer.signatures, "max_difference": answer.max_difference},
        "prediction": answer.first_prediction,
        "reason": f"version {version} {result['rollout']}; answered {answer.describe()}",
    }


def _smoke_once_served(url: str, name: str, model: smoke.LocalModel, examples: list[bytes], version: int,
                       timeout_s: float) -> smoke.SmokeResult:
    """The smoke request, once `version` answers at url. KServe's Standard mode calls an InferenceService Ready
    while its Deployment still rolls (the old pods are Available): the Service may route to the previous version
    until the new pods replace them, so the request is sent again until the new version answers (or timeout_s)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return smoke.run(url, name, model, examples, version=version)
        except smoke.OtherVersion as exc:
            if time.monotonic() >= deadline:
                raise smoke.SmokeFailed(f"{exc} after {timeout_s:g} s (the rollout did not finish)") from None
            time.sleep(SMOKE_RETRY_SECONDS)
