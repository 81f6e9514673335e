"""The tune step's kubernetes backend run: the Experiment created (or re-attached to) through the shared
restart-safe launcher (slipway/core/kube/launcher/, with katib.KATIB_EXPERIMENT: Succeeded / Failed conditions), waited
for, and its final status turned into the SDK-independent result (katib_results.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slipway.components.tune import search_spec as tune_spec
from slipway.components.tune.katib import KATIB_EXPERIMENT, TrialSettings, render_experiment
from slipway.components.tune.katib_results import best_result, explain_failure, trial_records
from slipway.core.errors import SlipwayError
from slipway.core.kube import launcher


class _Recording:
    """A ResourceClient that remembers the last object it read (to explain a failure after the launcher raised)."""

    def __init__(self, client: Any):
        self.client = client
        self.last: dict | None = None

    def get(self, ref):
        obj = self.client.get(ref)
        if obj is not None:
            self.last = obj
        return obj

    def create(self, body):
        obj = self.client.create(body)
        self.last = obj
        return obj

    def delete(self, ref):
        return self.client.delete(ref)

    def primary_log_tail(self, ref, selector, lines):
        return self.client.primary_log_tail(ref, selector, lines)


def run_on_cluster(
    spec: Mapping[str, Any] | str,
    name: str,
    namespace: str,
    trial: TrialSettings,
    *,
    reference_file: str,
    timeout_s: float,
    delete_policy: str = "always",
    client: Any = None,
    poll: launcher.Poll | None = None,
) -> dict:
    """Create (or re-attach to) the Experiment, wait for it to end, and return best_result() of the final object.

    Raises a one-line SlipwayError when the Experiment failed (e.g. more than maxFailedTrialCount trials failed),
    timed out (it is deleted), or succeeded without any trial reporting the objective metric.
    """
    search = tune_spec.load_spec(spec)
    body = render_experiment(search, name, namespace, trial)
    if client is None:
        from slipway.core.kube.client import KubeClient

        client = KubeClient()
    recording = _Recording(client)
    try:
        final = launcher.run(body, recording, KATIB_EXPERIMENT, reference_file, timeout_s, poll=poll,
                             delete_policy=delete_policy, log_selector={})
    except launcher.Interrupted:
        raise
    except SlipwayError as exc:
        explained = explain_failure(search, namespace, name, recording.last)
        if explained:
            raise SlipwayError(explained) from exc
        raise
    result = best_result(search, final)
    result["trials"] = trial_records(search, client, namespace, name)
    return result
