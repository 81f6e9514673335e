"""Worked-example module files (TFX module-file convention) and the schemas that go with them."""

from pathlib import Path


def module_path(file_name: str) -> Path:
    """Path of a file shipped in this folder, e.g. module_path("image_cnn.py")."""
    return Path(__file__).with_name(file_name)
