"""scikit-learn's handwritten digits as a class-per-folder PNG tree: the image sample for ingest.

1,797 grayscale 8x8 images in folders "0".."9" (pixel values 0..16 scaled to 0..255), plus three deliberately
broken files so a demo shows ingest skipping and counting them: a truncated PNG, random bytes named .png, and
an empty .jpg. Built once under the Slipway cache (no network: the data ships with scikit-learn) and rebuilt
when GENERATOR_VERSION changes.
"""

from __future__ import annotations

import io
import os
import random
import shutil
import tempfile
from pathlib import Path

from slipway.data.taxi import cache_dir

GENERATOR_VERSION = "1"
MARKER = ".slipway-digits-version"
NUM_IMAGES = 1797
# class folder -> file name of each broken file (ingest's skip reason in the comment)
BROKEN_FILES = {
    "truncated": ("3", "broken_truncated.png"),  # truncated
    "not_an_image": ("5", "broken_random_bytes.png"),  # not_an_image
    "empty_file": ("8", "broken_empty.jpg"),  # empty_file
}


def digits_folder() -> Path:
    """The digits PNG tree (building it on first use); pass it to ingest with data_format auto or images."""
    target = cache_dir() / "data" / "digits"
    if _is_current(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".digits.tmp-", dir=target.parent))
    try:
        _write_tree(staging)
        old = None
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=".digits.old-", dir=target.parent))
            os.replace(target, old / "digits")
        try:
            os.replace(staging, target)
        except OSError:
            if not _is_current(target):  # another process finished first: keep theirs if it is current
                raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _is_current(folder: Path) -> bool:
    marker = folder / MARKER
    return marker.is_file() and marker.read_text(encoding="utf-8").strip() == GENERATOR_VERSION


def _write_tree(root: Path) -> None:
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = np.clip(np.rint(digits.images * (255.0 / 16.0)), 0, 255).astype(np.uint8)
    for name in digits.target_names:
        (root / str(name)).mkdir()
    for index, (image, target) in enumerate(zip(pixels, digits.target, strict=True)):
        Image.fromarray(image, "L").save(root / str(target) / f"{index:04d}.png", optimize=False)
    # a real PNG (one digit enlarged so the cut falls inside the pixel data) cut in half
    buffer = io.BytesIO()
    Image.fromarray(pixels[0], "L").resize((64, 64), Image.NEAREST).save(buffer, "PNG")
    folder, name = BROKEN_FILES["truncated"]
    (root / folder / name).write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    folder, name = BROKEN_FILES["not_an_image"]
    (root / folder / name).write_bytes(random.Random(0).randbytes(512))
    folder, name = BROKEN_FILES["empty_file"]
    (root / folder / name).write_bytes(b"")
    (root / MARKER).write_text(GENERATOR_VERSION + "\n", encoding="utf-8")
