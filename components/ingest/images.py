"""Image inputs for ingest: class-per-folder JPEG/PNG trees and CIFAR-10 "python version" batches.

Both become the same tf.Example features: `image` (raw uint8 pixels, row-major H x W x C), `height`, `width`,
`channels` (int64) and the label (int64 class id) under the name the caller chose. Nothing here splits or
writes: the readers yield each serialized example with the value its split hash is taken of, one image at a time
(one batch file at a time for CIFAR-10), so decoded images are never all held at once.
"""

from __future__ import annotations

import io
import pickle
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from slipway.core.artifacts import sha256_file, sha256_tree
from slipway.core.errors import SlipwayError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
PIL_FORMATS = ("JPEG", "PNG", "MPO")  # MPO: multi-picture JPEG as some cameras write it
GRAYSCALE_MODES = ("1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "I;16N", "F")
RESERVED_FEATURES = ("image", "height", "width", "channels")
MAX_SKIPPED_EXAMPLES = 20

CIFAR_BATCH = re.compile(r"^(data_batch_\d+|test_batch)$")
CIFAR_META = "batches.meta"
CIFAR_SIDE = 32


@dataclass
class ImageData:
    """What an image reader found, for examples_meta.json: complete once its examples are exhausted."""

    classes: list[str] = field(default_factory=list)
    shape: tuple[int, int, int] = (0, 0, 0)
    rows_read: int = 0
    skipped: Counter = field(default_factory=Counter)
    skipped_examples: list[str] = field(default_factory=list)
    resized: int = 0
    per_class: Counter = field(default_factory=Counter)
    sources: list[dict] = field(default_factory=list)

    def skip(self, what: str, reason: str) -> None:
        self.skipped[reason] += 1
        if len(self.skipped_examples) < MAX_SKIPPED_EXAMPLES:
            self.skipped_examples.append(f"{what}: {reason}")

    def meta(self, label: str) -> dict:
        return {
            "label_classes": list(self.classes),
            "num_classes": len(self.classes),
            "columns": {"image": "bytes", "height": "int", "width": "int", "channels": "int", label: "int"},
            "rows_read": self.rows_read,
            "image_shape": list(self.shape),
            "skipped": dict(sorted(self.skipped.items())),
            "skipped_examples": list(self.skipped_examples),
            "resized": self.resized,
            "examples_per_class": {self.classes[i]: self.per_class[i] for i in range(len(self.classes))},
            "sources": self.sources,
        }


def image_label_name(label: str) -> str:
    """The output feature holding the class id; 'label' when none is given."""
    name = label or "label"
    if name in RESERVED_FEATURES:
        raise SlipwayError(f"label '{name}': clashes with an image feature ({', '.join(RESERVED_FEATURES)})")
    return name


def parse_image_size(spec: str) -> tuple[int, int] | None:
    """'' -> None (size of the first valid image); 'HxW' -> (H, W)."""
    if not spec:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", spec)
    if not match or int(match[1]) <= 0 or int(match[2]) <= 0:
        raise SlipwayError(f"image_size {spec!r}: expected HxW with positive integers, e.g. 28x28")
    return int(match[1]), int(match[2])


def image_example(pixels: bytes, height: int, width: int, channels: int, label: str, class_id: int) -> bytes:
    import tensorflow as tf

    example = tf.train.Example()
    features = example.features.feature
    features["image"].bytes_list.value.append(pixels)
    features["height"].int64_list.value.append(height)
    features["width"].int64_list.value.append(width)
    features["channels"].int64_list.value.append(channels)
    features[label].int64_list.value.append(class_id)
    return example.SerializeToString()


# -- class-per-folder JPEG/PNG trees ------------------------------------------------------------------------


def _visible(path: Path, root: Path) -> bool:
    return not any(part.startswith((".", "_")) for part in path.relative_to(root).parts)


def class_folders(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir() and _visible(p, root))


def looks_like_image_folder(root: Path) -> bool:
    """A folder whose sub-folders hold JPEG/PNG files (and with no data files of other kinds at its top)."""
    for folder in class_folders(root):
        if any(p.suffix.lower() in IMAGE_SUFFIXES and p.is_file() for p in folder.rglob("*")):
            return True
    return False


def decode_image(raw: bytes):
    """A loaded PIL image, or the reason it cannot be used (empty_file, not_an_image, truncated, ...)."""
    from PIL import Image, UnidentifiedImageError

    if not raw:
        return None, "empty_file"
    try:
        with Image.open(io.BytesIO(raw)) as probe:
            if probe.format not in PIL_FORMATS:
                return None, "unsupported_format"
            probe.verify()
        image = Image.open(io.BytesIO(raw))
        image.load()  # verify() does not decode pixel data: a cut-off JPEG only fails here
    except UnidentifiedImageError:
        return None, "not_an_image"
    except Image.DecompressionBombError:
        return None, "too_large"
    except (OSError, SyntaxError, ValueError, EOFError, IndexError) as exc:
        return None, "truncated" if "truncated" in str(exc).lower() or isinstance(exc, EOFError) else "corrupt"
    return image, ""


def image_folder_examples(data: str, label: str, image_size: str, out: ImageData) -> Iterator[tuple[bytes, str]]:
    """(serialized example, its path relative to `data`) per usable image, by class then path; `out` gathers the
    counts, the shape and the sources. The errors that need every file come when the images are exhausted."""
    from PIL import Image, ImageOps

    root = Path(data)
    target = parse_image_size(image_size)
    folders = class_folders(root)
    if len(folders) < 2:
        found = f"only '{folders[0].name}'" if folders else "none"
        raise SlipwayError(
            f"data {data}: image folders need one sub-folder per class and at least 2 classes (found {found})"
        )
    out.classes = [f.name for f in folders]
    files_per_class = []
    for folder in folders:
        files = sorted(p for p in folder.rglob("*") if p.is_file() and _visible(p, root))
        if not files:
            raise SlipwayError(f"data {data}: class folder '{folder.name}' is empty")
        files_per_class.append(files)
    for stray in sorted(p for p in root.iterdir() if p.is_file() and _visible(p, root)):
        out.rows_read += 1
        out.skip(stray.name, "outside_class_folder")
    mode = None
    channels = 0
    for class_id, files in enumerate(files_per_class):
        for path in files:
            out.rows_read += 1
            relative = path.relative_to(root).as_posix()
            if path.suffix.lower() not in IMAGE_SUFFIXES:
                out.skip(relative, "unsupported_extension")
                continue
            image, reason = decode_image(path.read_bytes())
            if image is None:
                out.skip(relative, reason)
                continue
            image = ImageOps.exif_transpose(image)
            if mode is None:  # the first valid image fixes channels (and size unless image_size was given)
                mode = "L" if image.mode in GRAYSCALE_MODES else "RGB"
                channels = 1 if mode == "L" else 3
                target = target or (image.height, image.width)
            if image.mode != mode:
                image = image.convert(mode)
            if (image.height, image.width) != target:
                image = image.resize((target[1], target[0]), Image.BILINEAR)
                out.resized += 1
            out.per_class[class_id] += 1
            yield image_example(image.tobytes(), target[0], target[1], channels, label, class_id), relative
    if not sum(out.per_class.values()):
        raise SlipwayError(f"data {data}: no usable image among {out.rows_read} files (skipped: {_counts(out)})")
    missing = [out.classes[i] for i in range(len(out.classes)) if not out.per_class[i]]
    if missing:
        raise SlipwayError(
            f"data {data}: class folder '{missing[0]}' has no usable image (skipped overall: {_counts(out)})"
        )
    out.shape = (target[0], target[1], channels)
    out.sources = [{"path": str(root), "sha256": sha256_tree(root), "files": out.rows_read,
                    "bytes": sum(p.stat().st_size for p in root.rglob("*") if p.is_file())}]


def _counts(out: ImageData) -> str:
    return ", ".join(f"{reason} {count}" for reason, count in sorted(out.skipped.items())) or "none"


# -- CIFAR-10 python batches --------------------------------------------------------------------------------


class _ArraysOnly(pickle.Unpickler):
    """Unpickle plain containers and numpy arrays only: a batch file must not be able to run code."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
        ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refuses to load {module}.{name}")
        return super().find_class(module, name)


def cifar_batch_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root] if CIFAR_BATCH.match(root.name) else []
    return sorted(p for p in root.iterdir() if p.is_file() and CIFAR_BATCH.match(p.name))


def _load_pickle(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            batch = _ArraysOnly(f, encoding="bytes").load()
    except Exception as exc:  # noqa: BLE001  (any unpickling failure means: not a batch file)
        reason = " ".join(str(exc).split())[:200]
        raise SlipwayError(f"cifar10 file {path}: not a readable pickle ({type(exc).__name__}: {reason})") from None
    if not isinstance(batch, dict):
        raise SlipwayError(f"cifar10 file {path}: holds a {type(batch).__name__}, expected a dict")
    return {k.decode("latin-1") if isinstance(k, bytes) else k: v for k, v in batch.items()}


def _label_names(root: Path) -> list[str] | None:
    path = root / CIFAR_META
    if not path.is_file():
        return None
    names = _load_pickle(path).get("label_names")
    if not isinstance(names, list) or len(names) < 2:
        raise SlipwayError(f"cifar10 file {path}: label_names missing or not a list of at least 2 names")
    return [n.decode("utf-8") if isinstance(n, bytes) else str(n) for n in names]


def cifar10_examples(data: str, label: str, image_size: str, out: ImageData) -> Iterator[tuple[bytes, bytes]]:
    """(serialized example, its original 32x32 pixels) per image of every batch file, one file loaded at a time;
    `out` gathers the counts and the sources."""
    import numpy as np
    from PIL import Image

    root = Path(data)
    files = cifar_batch_files(root)
    if not files:
        raise SlipwayError(f"data {data}: no CIFAR-10 batch files (data_batch_1..5, test_batch)")
    folder = root.parent if root.is_file() else root
    names = _label_names(folder)
    classes = names or [str(i) for i in range(10)]
    target = parse_image_size(image_size) or (CIFAR_SIDE, CIFAR_SIDE)
    out.classes, out.shape = classes, (target[0], target[1], 3)
    pixel_size = 3 * CIFAR_SIDE * CIFAR_SIDE
    for path in files:
        batch = _load_pickle(path)
        for needed in ("data", "labels"):
            if needed not in batch:
                raise SlipwayError(f"cifar10 file {path}: key b'{needed}' missing (keys: {sorted(batch)})")
        pixels, labels = batch["data"], batch["labels"]
        if not isinstance(pixels, np.ndarray) or pixels.dtype != np.uint8 or pixels.ndim != 2 \
                or pixels.shape[1] != pixel_size:
            what = f"{pixels.dtype} {list(pixels.shape)}" if isinstance(pixels, np.ndarray) else type(pixels).__name__
            raise SlipwayError(f"cifar10 file {path}: b'data' is {what}, expected uint8 [N, {pixel_size}]")
        try:
            labels = np.asarray(labels)
        except ValueError:
            labels = np.asarray([None])
        if labels.ndim != 1 or labels.dtype.kind not in "iu":
            raise SlipwayError(f"cifar10 file {path}: b'labels' is not a list of integers")
        if len(labels) != len(pixels):
            raise SlipwayError(f"cifar10 file {path}: {len(labels)} labels for {len(pixels)} images")
        if len(labels) and (labels.min() < 0 or labels.max() >= len(classes)):
            bad = int(labels.min() if labels.min() < 0 else labels.max())
            raise SlipwayError(f"cifar10 file {path}: label {bad} outside 0..{len(classes) - 1}")
        hwc = np.ascontiguousarray(pixels.reshape(-1, 3, CIFAR_SIDE, CIFAR_SIDE).transpose(0, 2, 3, 1))
        del batch, pixels  # one batch file's arrays at a time: hwc is the copy that is read
        out.rows_read += len(hwc)
        for image, class_id in zip(hwc, labels.tolist(), strict=True):
            original = raw = image.tobytes()  # the split follows the original 32x32 pixels
            if target != (CIFAR_SIDE, CIFAR_SIDE):
                raw = Image.fromarray(image, "RGB").resize((target[1], target[0]), Image.BILINEAR).tobytes()
                out.resized += 1
            out.per_class[class_id] += 1
            yield image_example(raw, target[0], target[1], 3, label, class_id), original
        out.sources.append({"path": str(path), "sha256": sha256_file(path), "bytes": path.stat().st_size})
    if names is not None:
        meta = folder / CIFAR_META
        out.sources.append({"path": str(meta), "sha256": sha256_file(meta), "bytes": meta.stat().st_size})
    if not out.rows_read:
        raise SlipwayError(f"data {data}: the CIFAR-10 batches hold no images")
