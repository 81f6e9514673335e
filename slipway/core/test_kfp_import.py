"""import_kfp: kfp without its API client (nor the Kubernetes client) until something asks for it, kfp.dsl whole,
kfp.Client still there on first use; inside a KFP pod (_KFP_RUNTIME=true already) kfp as its command imports it.
Each case in a fresh interpreter: what a process imported first decides how kfp is imported."""

import json
import os
import subprocess
import sys

PROBE = """
import json, os, sys
from slipway.core.kfp_import import import_kfp
import_kfp("kfp.dsl.executor_main")
import kfp
from kfp import dsl
seen = {"kubernetes": "kubernetes" in sys.modules, "client_imported": "kfp.client" in sys.modules,
        "authoring": all(hasattr(dsl, n) for n in ("component", "pipeline", "If")),
        "components": hasattr(kfp, "components"), "runtime": os.environ.get("_KFP_RUNTIME")}
try:
    kfp.missing_name
except AttributeError as exc:
    seen["missing"] = str(exc)
try:
    seen["client"] = kfp.Client.__module__
except AttributeError as exc:
    seen["client"] = str(exc)
seen.update(kubernetes_after="kubernetes" in sys.modules, validator_after="kubernetes_validate" in sys.modules)
print(json.dumps(seen))
"""


def _probe(**env: str) -> dict:
    environment = {k: v for k, v in os.environ.items() if k != "_KFP_RUNTIME"} | env
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=environment, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_kfp_comes_without_its_client_until_kfp_client_is_used():
    seen = _probe()
    assert seen["kubernetes"] is False and seen["client_imported"] is False  # the 63 MiB a run never uses
    assert seen["authoring"] and seen["components"] and seen["runtime"] is None  # the variable was put back
    assert seen["missing"] == "module 'kfp' has no attribute 'missing_name'"
    assert seen["client"] == "kfp.client.client" and seen["kubernetes_after"]
    assert seen["validator_after"] is False  # hidden while the Kubernetes client was first imported


def test_a_pods_runtime_mode_is_left_as_kfp_sets_it():
    seen = _probe(_KFP_RUNTIME="true")
    assert seen["runtime"] == "true" and seen["authoring"] is False  # kfp.dsl without authoring, as in a pod
    assert seen["client"] == "module 'kfp' has no attribute 'Client'"  # kfp's own runtime __init__
