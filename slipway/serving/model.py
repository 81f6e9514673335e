"""The kserve.Model that serves a TF Serving model base (runs in the serving environment, .venv-serving): it
watches the base, loads the version to serve and swaps it in, and answers predictions with it."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from kserve import InferRequest, Model
from kserve.errors import ModelNotReady

from slipway.serving import layout
from slipway.serving.payload_log import PayloadLog
from slipway.serving.protocol import (
    row_count,
    select_signature,
    v1_request,
    v1_response,
    v2_arrays,
    v2_response,
    v2_signature_name,
)
from slipway.serving.savedmodel import DEFAULT_SIGNATURE, Version, load_version, one_line

VERSION_HEADER = "x-model-version"
REQUEST_ID_HEADER = "x-request-id"  # the id a logged request's rows carry (labels are joined on it later)
log = logging.getLogger("slipway.serving")


def request_id_of(payload, headers: dict | None) -> str:
    """The request's id as the payload log keeps it: a V2 request's own id, the X-Request-Id header (KServe's and
    most gateways' convention), else a new one."""
    given = payload.id if isinstance(payload, InferRequest) else None
    given = given or (headers or {}).get(REQUEST_ID_HEADER)
    return str(given) if given else uuid.uuid4().hex


class SavedModelServer(Model):
    """A TF Serving model base as one kserve.Model: the served version is swapped under it, atomically."""

    def __init__(self, name: str, base: str, pool: ThreadPoolExecutor, pinned: int | None = None):
        super().__init__(name, return_response_headers=True)
        self.base, self._pool, self.pinned = base, pool, pinned
        self._served: Version | None = None
        self.failed: dict[int, str] = {}  # version -> why it did not load (shown in the metadata)
        self._last_problem = ""
        self.on_version: Callable[[int | None], None] = lambda number: None
        self.payload_log: PayloadLog | None = None  # --log-payloads: every answered row, written in the background

    @property
    def version(self) -> int | None:
        served = self._served
        return served.number if served else None

    def load(self) -> bool:
        return self.ready  # kserve calls this for a model that is not ready; the watcher does the loading

    def served(self) -> Version:
        served = self._served
        if served is None:
            raise ModelNotReady(self.name, f"no version of {self.base} is loaded")
        return served

    # watching the base (one background thread)

    def refresh(self) -> None:
        """Serve the highest loadable version under the base (or the pinned one); called at start and every poll."""
        try:
            found = layout.versions(self.base)
        except Exception as exc:  # an unreachable object store: keep serving what is loaded
            self._problem(f"cannot list {self.base}: {exc}")
            return
        current = self.version
        if self.pinned is not None:
            # A pinned version stays served even if it leaves the base: what serves is the spec's business.
            if current is None and self.pinned in found and self.pinned not in self.failed:
                self._try_load(self.pinned)
            elif current is None:
                self._problem(f"version {self.pinned} of {self.base}: "
                              f"{self.failed.get(self.pinned) or 'not in the base'}")
            return
        for number in sorted(set(found) - set(self.failed), reverse=True):
            if number == current or self._try_load(number):
                return
        if current is not None and current not in found:
            self._swap(None)
            log.warning("version %d left %s and no other version can be served: not ready", current, self.base)

    def watch(self, stop: threading.Event, poll_seconds: float) -> None:
        """Refresh every poll_seconds until stop is set (the watcher thread's body)."""
        while not stop.wait(poll_seconds):
            try:
                self.refresh()
            except Exception as exc:  # the watcher must outlive any one bad poll
                self._problem(f"watching {self.base}: {exc}")

    def _try_load(self, number: int) -> bool:
        try:
            version = load_version(self.base, number, self._pool)
        except Exception as exc:
            self.failed[number] = one_line(exc)
            log.warning("version %d of %s failed to load, skipped: %s", number, self.base, self.failed[number])
            return False
        previous = self.version
        self._swap(version)
        log.info("serving version %d of %s%s", number, self.base, f" (was {previous})" if previous else "")
        return True

    def _swap(self, version: Version | None) -> None:
        self._served = version  # one reference assignment: a request sees the old version or the new one
        self.ready = version is not None
        self._last_problem = ""
        self.on_version(self.version)

    def _problem(self, message: str) -> None:
        if message != self._last_problem:  # once, not every poll
            log.warning("%s", one_line(message))
            self._last_problem = message

    # requests

    async def predict(self, payload, headers: dict | None = None, response_headers: dict | None = None):
        served = self.served()
        if isinstance(payload, InferRequest):
            sig = select_signature(served.signatures, v2_signature_name(payload))
            arrays = v2_arrays(payload, sig)
            rows = row_count(arrays)
            outputs = await sig.batcher.run(arrays, rows)
            result = v2_response(payload, self.name, served.number, outputs)
        else:
            sig, arrays, rows, row_format = v1_request(payload, served.signatures)
            outputs = await sig.batcher.run(arrays, rows)
            result = v1_response(outputs, row_format)
        if response_headers is not None:
            response_headers[VERSION_HEADER] = str(served.number)
        if self.payload_log is not None:
            request_id = request_id_of(payload, headers)
            self.payload_log.record(sig.name, served.number, arrays, outputs, rows, request_id)
            if response_headers is not None:  # a made-up id is only useful if the client learns it
                response_headers[REQUEST_ID_HEADER] = request_id
        return result

    def _default_specs(self, outputs: bool) -> list[dict]:
        served = self._served
        sig = served.signatures.get(DEFAULT_SIGNATURE) if served else None
        if sig is None:
            return []
        specs = sig.outputs if outputs else sig.inputs
        return [{"name": key, "datatype": spec.datatype, "shape": spec.v2_shape()} for key, spec in specs.items()]

    def get_input_types(self) -> list[dict]:
        return self._default_specs(outputs=False)

    def get_output_types(self) -> list[dict]:
        return self._default_specs(outputs=True)

    def tf_serving_metadata(self) -> dict:
        served = self.served()
        # TF Serving's shape, plus the versions that would not load (a deploy waiting for one learns why at once)
        # and the served version's labels (slipway predict names the classes; TF Serving on a cluster has none).
        return {"model_spec": {"name": self.name, "signature_name": "", "version": str(served.number)},
                "metadata": {"signature_def": {"signature_def": served.signature_defs}},
                "failed_versions": {str(number): why for number, why in sorted(self.failed.items())},
                "labels": served.labels}
