"""Import kfp without its API client until something uses it.

`import kfp` imports kfp.client, and through it the Kubernetes client: about 1,200 modules and 63 MiB in every
process that imports kfp (the CLI, the warm step process and each step's copy of it), though `slipway run` never
talks to an API server. kfp's own `__init__` leaves the client out when _KFP_RUNTIME is "true" (what a component's
command sets in its pod), but the same variable also leaves `dsl.component`, `dsl.pipeline` and the rest of the
authoring names out of kfp.dsl. So the variable is set only while kfp's `__init__` runs; kfp.dsl and
kfp.components are then imported whole, as `import kfp` would have, and `kfp.Client` / `kfp.client` import the
client on first use (a module `__getattr__`), so a user's `kfp.Client()` after ours still works.

The client, when it is imported, brings the Kubernetes client's dynamic client, which imports kubernetes_validate
when it is installed (it is, in the development environment: our manifest tests use it). That import builds
jsonschema's format checkers, among them an RFC 3987 grammar: 1.4 s on a quiet core, up to 4 s on a busy one, for
a validator kfp never calls. So while the Kubernetes client is first imported the validator is made to look absent;
afterwards `import kubernetes_validate` works as before (the manifest tests import it themselves).
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

_HIDDEN = "kubernetes_validate"
_RUNTIME = "_KFP_RUNTIME"  # kfp/__init__.py: "true" leaves kfp.client (and kfp.dsl's authoring names) out
_CLIENT_NAMES = {"Client": "Client", "client": None}  # kfp's attributes that need kfp.client: {name: its attribute}


def import_kfp(name: str = "kfp") -> ModuleType:
    """import_module(name) (kfp or one of its modules), kfp itself imported without its API client the first time,
    and kubernetes_validate hidden while the Kubernetes client is first imported."""
    if "kfp" not in sys.modules:
        _import_kfp_without_client()
    if "kubernetes" in sys.modules or _HIDDEN in sys.modules:
        return importlib.import_module(name)
    sys.modules[_HIDDEN] = None  # type: ignore[assignment]  (None: "import kubernetes_validate" raises ImportError)
    try:
        return importlib.import_module(name)
    finally:
        if sys.modules.get(_HIDDEN, ...) is None:
            del sys.modules[_HIDDEN]


def _import_kfp_without_client() -> None:
    before = os.environ.get(_RUNTIME)
    os.environ[_RUNTIME] = "true"
    try:
        kfp = importlib.import_module("kfp")
    finally:
        if before is None:
            del os.environ[_RUNTIME]
        else:
            os.environ[_RUNTIME] = before
    if before != "true":  # what kfp's __init__ would have imported, but the client
        importlib.import_module("kfp.dsl")
        importlib.import_module("kfp.components")
        if not hasattr(kfp, "__getattr__"):
            kfp.__getattr__ = _client_on_first_use  # type: ignore[attr-defined]  (PEP 562)


def _client_on_first_use(name: str) -> object:
    """kfp.Client and kfp.client, imported when first asked for."""
    if name not in _CLIENT_NAMES:
        raise AttributeError(f"module 'kfp' has no attribute {name!r}")
    client = import_kfp("kfp.client")
    attribute = _CLIENT_NAMES[name]
    return getattr(client, attribute) if attribute else client
