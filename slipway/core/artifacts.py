"""On-disk layouts shared by components, and the write-then-rename rule for outputs.

Layouts follow TFX so TFX tools read our artifacts: an Examples folder holds one `Split-<name>/` folder per
split of gzip TFRecord shards of tf.Example; a schema folder holds `schema.pbtxt`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from slipway.core import storage

SPLIT_PREFIX = "Split-"
EXAMPLES_META = "examples_meta.json"
SCHEMA_FILE = "schema.pbtxt"
SHARD_SUFFIX = ".gz"


def split_dir(examples_root: str | os.PathLike, split: str) -> Path:
    return Path(examples_root) / f"{SPLIT_PREFIX}{split}"


def split_names(examples_root: str | os.PathLike) -> list[str]:
    root = Path(examples_root)
    return sorted(p.name[len(SPLIT_PREFIX):] for p in root.glob(f"{SPLIT_PREFIX}*") if p.is_dir())


def split_files(examples_root: str | os.PathLike, split: str) -> list[str]:
    """The TFRecord shards of one split (a local folder or an object-store URI), sorted; an error if none."""
    files = storage.glob(split_pattern(examples_root, split))
    if not files:
        from slipway.core.errors import SlipwayError

        raise SlipwayError(f"examples {examples_root}: split '{split}' has no TFRecord files")
    return files


def split_pattern(examples_root: str | os.PathLike, split: str) -> str:
    return storage.join(examples_root, f"{SPLIT_PREFIX}{split}", f"*{SHARD_SUFFIX}")


def shard_name(index: int, count: int) -> str:
    return f"data_tfrecord-{index:05d}-of-{count:05d}{SHARD_SUFFIX}"


def read_json(path: str | os.PathLike) -> dict:
    return json.loads(storage.read_text(path))


def write_json(path: str | os.PathLike, data: dict) -> None:
    storage.write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def write_metadata_file(artifact) -> None:
    """A metrics artifact's metadata as a small JSON file at its path. KFP keeps Metrics and ClassificationMetrics in
    ML Metadata only; without a file its launcher logs that the output path does not exist and the UI's preview of
    the artifact answers 500."""
    atomic_write_text(artifact.path, json.dumps(dict(artifact.metadata), indent=2, sort_keys=True, default=str) + "\n")


def examples_meta(examples_root: str | os.PathLike) -> dict:
    """What ingest recorded about an Examples folder (splits, counts, label, classes, columns)."""
    path = storage.join(examples_root, EXAMPLES_META)
    if not storage.exists(path):
        from slipway.core.errors import SlipwayError

        raise SlipwayError(f"examples {examples_root}: {EXAMPLES_META} is missing (not written by ingest?)")
    return read_json(path)


def read_blessing(blessing_dir: str | os.PathLike) -> tuple[bool, str, dict]:
    """(blessed, evaluate's message, the overall metrics it judged) from evaluate's blessing folder (a BLESSED or
    NOT_BLESSED marker and blessing.json), local or in the object store: what deploy and batch_predict gate on."""
    from slipway.core.errors import SlipwayError

    blessed = storage.exists(storage.join(blessing_dir, "BLESSED"))
    if blessed == storage.exists(storage.join(blessing_dir, "NOT_BLESSED")):
        raise SlipwayError(f"blessing {blessing_dir}: expected exactly one of BLESSED or NOT_BLESSED (not written by "
                           "evaluate?)")
    decision = {}
    if storage.exists(storage.join(blessing_dir, "blessing.json")):
        decision = json.loads(storage.read_text(storage.join(blessing_dir, "blessing.json")))
    metrics = decision.get("metrics") if isinstance(decision.get("metrics"), dict) else {}
    return blessed, str(decision.get("message") or ""), metrics


@contextlib.contextmanager
def staged_output(final_path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling folder; move it to `final_path` only if the block completes.

    A failed step therefore never leaves a complete-looking artifact behind: the temporary folder is removed
    and whatever stood at `final_path` before is left alone (an empty placeholder the orchestrator made is
    removed so that nothing valid-looking remains).
    """
    final = Path(final_path)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    os.chmod(staging, 0o777 & ~_umask())  # mkdtemp makes it private; the artifact should not be
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        _remove_empty(final)
        raise
    if final.is_dir():
        shutil.rmtree(final)
    elif final.exists():
        final.unlink()
    os.replace(staging, final)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _remove_empty(path: Path) -> None:
    if path.is_dir() and not any(path.iterdir()):
        path.rmdir()


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write a whole file or nothing: a temp file in the same folder, then rename."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.tmp-", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def sha256_tree(root: str | os.PathLike) -> str:
    """A content hash of a file or of every file under a folder (relative names included)."""
    base = Path(root)
    if base.is_file():
        return sha256_file(base)
    digest = hashlib.sha256()
    for path in sorted(p for p in base.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(base)).encode())
        digest.update(b"\0")
        digest.update(sha256_file(path).encode())
    return digest.hexdigest()
