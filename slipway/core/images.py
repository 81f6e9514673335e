"""Container images the components run in, pinned by digest from images/digests.json.

`slipway images build --registry R` pushes the images and writes that file; every name here is read from it when
this module is imported, so the compiled YAML names `R/slipway-runtime@sha256:...` and a recompile is the only way
an image changes. Without a digest (no file, as inside the images themselves, or an image missing from it) a name
falls back to the version tag, which `slipway compile` refuses to write (`require_pinned`).
SLIPWAY_IMAGE_DIGESTS points at another digests file (the in-image tests use the images they just built).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from slipway import __version__
from slipway.core.errors import SlipwayError

IMAGE_NAMES = ("runtime", "trainer", "serving")
DIGESTS_ENV = "SLIPWAY_IMAGE_DIGESTS"
DIGESTS_FILE = Path(__file__).resolve().parents[2] / "images" / "digests.json"
# The authoring wheel (slipway/authoring.py) has no images/ folder: it carries the digests it was built with here.
PACKAGED_DIGESTS_FILE = Path(__file__).with_name("image_digests.json")
DEFAULT_REGISTRY = "ghcr.io/slipway-ml"
# What the components need: the runtime is every step's image, the trainer runs MPIJob pods and Katib trials.
REQUIRED_BY_COMPONENTS = ("runtime", "trainer")
PINNED = re.compile(r"@sha256:[0-9a-f]{64}$")


def repository_name(registry: str, name: str) -> str:
    return f"{registry.rstrip('/')}/slipway-{name}"


def digests_path() -> Path:
    if os.environ.get(DIGESTS_ENV):
        return Path(os.environ[DIGESTS_ENV])
    return DIGESTS_FILE if DIGESTS_FILE.exists() or not PACKAGED_DIGESTS_FILE.exists() else PACKAGED_DIGESTS_FILE


def read_digests(path: Path | None = None) -> dict:
    path = path or digests_path()
    if not path.exists():
        return {}
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise SlipwayError(f"images: {path} is not valid JSON ({exc.msg})") from None
    return record if isinstance(record, dict) else {}


def image_reference(name: str, record: dict | None = None) -> str:
    """`repository@sha256:...` from the digests record, else the unpinned version tag."""
    entry = (read_digests() if record is None else record).get(name) or {}
    if entry.get("image") and PINNED.search("@" + str(entry.get("digest", ""))):
        return f"{entry['image']}@{entry['digest']}"
    return f"{repository_name(DEFAULT_REGISTRY, name)}:{__version__}"


def require_pinned(names: tuple[str, ...] = REQUIRED_BY_COMPONENTS) -> None:
    """One line naming the first image the digests file cannot pin (compile calls this first)."""
    path = digests_path()
    record = read_digests(path)
    for name in names:
        if not PINNED.search(image_reference(name, record)):
            raise SlipwayError(f"images: {path} has no digest for the {name} image the components need; "
                               f"run `slipway images build --registry REGISTRY`")


def is_pinned(reference: str) -> bool:
    return bool(PINNED.search(reference))


_RECORD = read_digests()
# Built from images/runtime/Dockerfile: the project environment from requirements.lock plus slipway itself.
RUNTIME_IMAGE = image_reference("runtime", _RECORD)
# Built from images/trainer/Dockerfile: the runtime plus sshd for the MPI Operator's workers.
TRAINER_IMAGE = image_reference("trainer", _RECORD)
# Built from images/serving/Dockerfile: KServe's model server with slipway.serving (images/serving/requirements.lock).
SERVING_IMAGE = image_reference("serving", _RECORD)
