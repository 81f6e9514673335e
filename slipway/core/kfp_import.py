"""Import kfp without the seconds its Kubernetes client spends on a validator nobody here uses.

kfp imports the Kubernetes client, whose dynamic client imports kubernetes_validate when it is installed (it is, in
the development environment: our manifest tests use it). That import builds jsonschema's format checkers, among
them an RFC 3987 grammar: 1.4 s on a quiet core here and up to 4 s on a busy one, in every process that imports
kfp: the CLI, the warm step process. The dynamic client only uses it to validate objects it is asked to (never, in
kfp). So while kfp is first imported the validator is made to look absent; afterwards `import kubernetes_validate`
works as before (the manifest tests import it themselves).
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

_HIDDEN = "kubernetes_validate"


def import_kfp(name: str = "kfp") -> ModuleType:
    """import_module(name) (kfp or one of its modules) with kubernetes_validate hidden during kfp's first import."""
    if "kfp" in sys.modules or _HIDDEN in sys.modules:
        return importlib.import_module(name)
    sys.modules[_HIDDEN] = None  # type: ignore[assignment]  (None: "import kubernetes_validate" raises ImportError)
    try:
        return importlib.import_module(name)
    finally:
        if sys.modules.get(_HIDDEN, ...) is None:
            del sys.modules[_HIDDEN]
