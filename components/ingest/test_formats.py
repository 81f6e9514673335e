"""Ingest of image folders, CIFAR-10 batches and TFRecords, on real files written here."""

from __future__ import annotations

import gzip
import io
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from slipway.components.ingest import executor, sources
from slipway.core.artifacts import examples_meta, sha256_file, sha256_tree, split_files
from slipway.core.errors import SlipwayError


def read_examples(root: Path) -> list:
    import tensorflow as tf

    out = []
    for split in examples_meta(root)["splits"]:
        for record in tf.data.TFRecordDataset(split_files(root, split), compression_type="GZIP"):
            out.append(tf.train.Example.FromString(record.numpy()))
    return out


def feature(example, name):
    f = example.features.feature[name]
    return list(getattr(f, f.WhichOneof("kind")).value)


def pixels(seed: int, height: int, width: int, channels: int) -> np.ndarray:
    shape = (height, width) if channels == 1 else (height, width, channels)
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def save(path: Path, array: np.ndarray, mode: str | None = None, fmt: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    image = Image.fromarray(array) if mode is None else Image.fromarray(array).convert(mode)
    image.save(path, fmt)


def encoded(array: np.ndarray, fmt: str) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, fmt)
    return buffer.getvalue()


@pytest.fixture
def image_tree(tmp_path: Path) -> Path:
    """cat/ and dog/ with 6x4 RGB PNGs and JPEGs, odd modes and sizes, and every kind of broken file."""
    root = tmp_path / "pets"
    for i in range(12):
        save(root / "cat" / f"c{i:02d}.png", pixels(i, 6, 4, 3))
        save(root / "dog" / "nested" / f"d{i:02d}.jpg", pixels(100 + i, 6, 4, 3))
    save(root / "dog" / "rgba.png", pixels(200, 6, 4, 4))  # RGBA -> RGB
    save(root / "dog" / "palette.png", pixels(201, 6, 4, 3), mode="P")
    save(root / "dog" / "gray.png", pixels(202, 6, 4, 1))  # L -> RGB
    save(root / "dog" / "big.png", pixels(203, 12, 8, 3))  # resized to 6x4
    save(root / "dog" / "cmyk.jpg", pixels(204, 6, 4, 3), mode="CMYK")
    png = encoded(pixels(300, 40, 40, 3), "PNG")
    jpeg = encoded(pixels(301, 40, 40, 3), "JPEG")
    (root / "cat" / "cut.png").write_bytes(png[: len(png) // 2])
    (root / "dog" / "cut.jpg").write_bytes(jpeg[:-10])  # passes verify(), fails only on load()
    (root / "cat" / "noise.png").write_bytes(np.random.default_rng(7).bytes(300))
    (root / "dog" / "empty.jpg").write_bytes(b"")
    (root / "dog" / "notes.txt").write_text("not an image")
    (root / "cat" / ".DS_Store").write_bytes(b"hidden files are ignored")
    return root


def test_image_folder_to_examples_with_skips_conversions_and_resizes(image_tree: Path, tmp_path: Path):
    out = tmp_path / "examples"
    meta = executor.run(data=str(image_tree), output_dir=str(out), label="animal")
    assert meta["data_format"] == "images"
    assert meta["label_classes"] == ["cat", "dog"] and meta["num_classes"] == 2
    assert meta["image_shape"] == [6, 4, 3]
    assert meta["columns"] == {"image": "bytes", "height": "int", "width": "int", "channels": "int", "animal": "int"}
    assert meta["skipped"] == {"truncated": 2, "not_an_image": 1, "empty_file": 1, "unsupported_extension": 1}
    assert "cat/cut.png: truncated" in meta["skipped_examples"]
    assert "dog/cut.jpg: truncated" in meta["skipped_examples"]
    assert "dog/notes.txt: unsupported_extension" in meta["skipped_examples"]
    assert meta["resized"] == 1
    assert meta["examples_per_class"] == {"cat": 12, "dog": 17}
    assert sum(meta["splits"].values()) == 29 and meta["rows_read"] == 34
    assert meta["sources"] == [{"path": str(image_tree), "sha256": sha256_tree(image_tree), "files": 34,
                                "bytes": sum(p.stat().st_size for p in image_tree.rglob("*") if p.is_file())}]
    assert examples_meta(out) == meta
    examples = read_examples(out)
    assert len(examples) == 29
    for example in examples:
        assert feature(example, "height") == [6] and feature(example, "width") == [4]
        assert feature(example, "channels") == [3] and len(feature(example, "image")[0]) == 6 * 4 * 3
    by_pixels = {feature(e, "image")[0]: feature(e, "animal")[0] for e in examples}
    assert by_pixels[pixels(3, 6, 4, 3).tobytes()] == 0  # PNG is lossless: row-major H x W x C, cat = class 0
    assert by_pixels[pixels(200, 6, 4, 4)[:, :, :3].tobytes()] == 1  # RGBA: alpha dropped
    assert by_pixels[np.repeat(pixels(202, 6, 4, 1)[:, :, None], 3, axis=2).tobytes()] == 1  # gray -> RGB


def test_image_split_is_deterministic_by_relative_path(image_tree: Path, tmp_path: Path):
    first = executor.run(data=str(image_tree), output_dir=str(tmp_path / "a"), label="label", splits="train:1,eval:1")
    moved = tmp_path / "elsewhere" / "pets"
    moved.parent.mkdir()
    os.replace(image_tree, moved)  # the split hashes paths relative to the data folder: moving it changes nothing
    second = executor.run(data=str(moved), output_dir=str(tmp_path / "b"), label="label", splits="train:1,eval:1")
    assert first["splits"] == second["splits"] and 0 < first["splits"]["eval"] < 29

    def eval_images(root: Path) -> set:
        import tensorflow as tf

        records = tf.data.TFRecordDataset(split_files(root, "eval"), compression_type="GZIP")
        return {feature(tf.train.Example.FromString(r.numpy()), "image")[0] for r in records}

    assert eval_images(tmp_path / "a") == eval_images(tmp_path / "b")


def test_grayscale_first_image_and_explicit_size(tmp_path: Path):
    root = tmp_path / "digits"
    save(root / "a" / "0.png", pixels(1, 5, 5, 1))  # first valid image: grayscale -> 1 channel
    save(root / "a" / "1.png", pixels(2, 5, 5, 3))  # RGB -> L
    for i in range(6):
        save(root / "b" / f"{i}.jpg", pixels(10 + i, 9, 7, 3))
    meta = executor.run(data=str(root), output_dir=str(tmp_path / "o"), label="", image_size="4x3",
                        data_format="images")
    assert meta["label"] == "label" and meta["image_shape"] == [4, 3, 1]
    assert meta["resized"] == 8 and meta["skipped"] == {}
    assert {len(feature(e, "image")[0]) for e in read_examples(tmp_path / "o")} == {12}


IMAGE_ERRORS = {
    "empty class folder": ("class folder 'dog' is empty", {"cat/a.png": "ok", "dog": None}),
    "single class": ("at least 2 classes (found only 'cat')", {"cat/a.png": "ok"}),
    "every image corrupt": ("no usable image among 3 files (skipped: empty_file 1, not_an_image 1, truncated 1)",
                            {"cat/a.png": "cut", "dog/b.png": "noise", "dog/c.jpg": "empty"}),
    "a class with only corrupt images": ("class folder 'dog' has no usable image",
                                         {"cat/a.png": "ok", "dog/b.png": "noise"}),
}


@pytest.mark.parametrize("case", sorted(IMAGE_ERRORS))
def test_bad_image_folders_fail_with_one_line_and_leave_nothing(case: str, tmp_path: Path):
    expected, files = IMAGE_ERRORS[case]
    root = tmp_path / "imgs"
    root.mkdir()
    png = encoded(pixels(0, 20, 20, 3), "PNG")
    content = {"ok": png, "cut": png[: len(png) // 2], "noise": b"\x00garbage" * 20, "empty": b""}
    for name, kind in files.items():
        if kind is None:
            (root / name).mkdir()
        else:
            (root / name).parent.mkdir(exist_ok=True)
            (root / name).write_bytes(content[kind])
    out = tmp_path / "examples"
    with pytest.raises(SlipwayError) as info:
        executor.run(data=str(root), output_dir=str(out), label="label", data_format="images")
    assert expected in str(info.value) and str(root) in str(info.value) and "\n" not in str(info.value)
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".examples")]


def test_image_parameter_errors(image_tree: Path, tmp_path: Path):
    with pytest.raises(SlipwayError, match="key 'id': not supported for images"):
        executor.run(data=str(image_tree), output_dir=str(tmp_path / "o"), label="label", key="id")
    with pytest.raises(SlipwayError, match="image_size '4by4': expected HxW"):
        executor.run(data=str(image_tree), output_dir=str(tmp_path / "o"), label="label", image_size="4by4")
    with pytest.raises(SlipwayError, match="label 'image': clashes with an image feature"):
        executor.run(data=str(image_tree), output_dir=str(tmp_path / "o"), label="image")
    with pytest.raises(SlipwayError, match="data_format 'jpeg': expected one of auto, csv"):
        executor.run(data=str(image_tree), output_dir=str(tmp_path / "o"), label="label", data_format="jpeg")
    csv = tmp_path / "d.csv"
    csv.write_text("x,label\n1,a\n2,b\n")
    with pytest.raises(SlipwayError, match="image_size '8x8': only applies to images and cifar10"):
        executor.run(data=str(csv), output_dir=str(tmp_path / "o"), label="label", image_size="8x8")


# -- CIFAR-10 -----------------------------------------------------------------------------------------------


def write_batch(path: Path, n: int, seed: int, override: dict | None = None) -> np.ndarray:
    data = np.random.default_rng(seed).integers(0, 256, (n, 3072), dtype=np.uint8)
    batch = {b"batch_label": b"x", b"data": data, b"labels": [(seed + i) % 10 for i in range(n)],
             b"filenames": [b"f%d" % i for i in range(n)]}
    batch.update(override or {})
    path.write_bytes(pickle.dumps(batch, protocol=2))
    return data


@pytest.fixture
def cifar(tmp_path: Path) -> Path:
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    write_batch(root / "data_batch_1", 40, 1)
    write_batch(root / "data_batch_2", 40, 2)
    write_batch(root / "test_batch", 20, 3)
    names = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]
    (root / "batches.meta").write_bytes(pickle.dumps({b"label_names": names, b"num_vis": 3072}, protocol=2))
    (root / "readme.html").write_text("<html></html>")
    return root


def test_cifar10_batches_pooled_converted_and_hash_split(cifar: Path, tmp_path: Path):
    out = tmp_path / "examples"
    meta = executor.run(data=str(cifar), output_dir=str(out), label="label", splits="train:3,eval:1,test:1")
    assert meta["data_format"] == "cifar10" and meta["image_shape"] == [32, 32, 3]
    assert meta["label_classes"][:3] == ["airplane", "automobile", "bird"] and meta["num_classes"] == 10
    assert meta["rows_read"] == 100 and sum(meta["splits"].values()) == 100 and min(meta["splits"].values()) > 0
    assert [Path(s["path"]).name for s in meta["sources"]] == ["data_batch_1", "data_batch_2", "test_batch",
                                                               "batches.meta"]
    assert all(s["sha256"] == sha256_file(s["path"]) for s in meta["sources"])
    examples = read_examples(out)
    data = pickle.loads((cifar / "data_batch_2").read_bytes())[b"data"]
    hwc = data[5].reshape(3, 32, 32).transpose(1, 2, 0)  # channel-major planes -> H x W x C
    match = [e for e in examples if feature(e, "image")[0] == hwc.tobytes()]
    assert len(match) == 1 and feature(match[0], "label") == [(2 + 5) % 10]
    assert hwc[0, 1, 2] == data[5][2 * 1024 + 0 * 32 + 1]  # pixel (row 0, col 1), blue plane
    again = executor.run(data=str(cifar), output_dir=str(tmp_path / "again"), label="label",
                         splits="train:3,eval:1,test:1")
    assert again["splits"] == meta["splits"]


def test_cifar10_without_meta_uses_digit_names_and_resizes(cifar: Path, tmp_path: Path):
    (cifar / "batches.meta").unlink()
    meta = executor.run(data=str(cifar / "test_batch"), output_dir=str(tmp_path / "o"), label="y", image_size="16x16")
    assert meta["label_classes"] == [str(i) for i in range(10)]
    assert meta["image_shape"] == [16, 16, 3] and meta["resized"] == 20 and meta["rows_read"] == 20


CIFAR_ERRORS = {
    "not a pickle": (lambda p: p.write_bytes(b"plain text, no pickle"), "not a readable pickle"),
    "missing labels": (lambda p: _drop(p, b"labels"),
                       "key b'labels' missing"),
    "wrong shape": (lambda p: write_batch(p, 4, 0, {b"data": np.zeros((4, 1024), np.uint8)}),
                    "b'data' is uint8 [4, 1024], expected uint8 [N, 3072]"),
    "label count": (lambda p: write_batch(p, 4, 0, {b"labels": [1, 2, 3]}), "3 labels for 4 images"),
    "label range": (lambda p: write_batch(p, 4, 0, {b"labels": [1, 2, 3, 10]}), "label 10 outside 0..9"),
    "code in the pickle": (lambda p: p.write_bytes(pickle.dumps(Path("x"))), "refuses to load pathlib"),
}


def _drop(path: Path, key: bytes) -> None:
    write_batch(path, 4, 0)
    batch = pickle.loads(path.read_bytes())
    del batch[key]
    path.write_bytes(pickle.dumps(batch))


@pytest.mark.parametrize("case", sorted(CIFAR_ERRORS))
def test_bad_cifar_batches_name_the_file(case: str, cifar: Path, tmp_path: Path):
    write, expected = CIFAR_ERRORS[case]
    write(cifar / "data_batch_2")
    out = tmp_path / "examples"
    with pytest.raises(SlipwayError) as info:
        executor.run(data=str(cifar), output_dir=str(out), label="label")
    message = str(info.value)
    assert f"cifar10 file {cifar / 'data_batch_2'}: " in message and expected in message and "\n" not in message
    assert not out.exists()


# -- TFRecord ------------------------------------------------------------------------------------------------


def example_bytes(**values) -> bytes:
    from tests.support.inputs import example_from_row

    return example_from_row(values).SerializeToString()


def write_records(path: Path, records: list[bytes], gzip_it: bool) -> None:
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path), "GZIP" if gzip_it else None) as writer:
        for record in records:
            writer.write(record)


def test_tfrecord_folder_string_labels_gzip_by_suffix_and_by_content(tmp_path: Path):
    folder = tmp_path / "records"
    folder.mkdir()
    first = [example_bytes(id=i, x=i * 0.5, kind="ab"[i % 2]) for i in range(60)]
    second = [example_bytes(id=i, x=1.0, kind="abc"[i % 3]) for i in range(60, 120)] + [example_bytes(id=999)]
    write_records(folder / "a.tfrecord.gz", first, gzip_it=True)
    write_records(folder / "b.tfrecords", second, gzip_it=True)  # gzip without .gz: detected from the bytes
    out = tmp_path / "examples"
    meta = executor.run(data=str(folder), output_dir=str(out), label="kind", key="id")
    assert meta["data_format"] == "tfrecord" and meta["label_classes"] == ["a", "b", "c"]
    assert meta["columns"] == {"id": "int", "kind": "int", "x": "float"}
    assert meta["rows_read"] == 121 and meta["rows_missing_label"] == 1 and sum(meta["splits"].values()) == 120
    assert len(meta["sources"]) == 2 and meta["split_key"] == "id"
    kinds = {feature(e, "id")[0]: feature(e, "kind")[0] for e in read_examples(out)}
    assert kinds[4] == 0 and kinds[5] == 1 and kinds[62] == 2
    # the same key hash as CSV: the same ids land in the same splits
    csv = tmp_path / "same.csv"
    csv.write_text("id,kind\n" + "".join(f"{i},{'abc'[i % 3]}\n" for i in range(120)))
    executor.run(data=str(csv), output_dir=str(tmp_path / "from_csv"), label="kind", key="id")

    def eval_ids(root: Path) -> set:
        import tensorflow as tf

        records = tf.data.TFRecordDataset(split_files(root, "eval"), compression_type="GZIP")
        return {feature(tf.train.Example.FromString(r.numpy()), "id")[0] for r in records}

    assert eval_ids(out) == eval_ids(tmp_path / "from_csv")


def test_tfrecord_int_labels_pass_through_byte_for_byte(tmp_path: Path):
    records = [example_bytes(label=i % 3, image=f"px{i}") for i in range(90)]
    path = tmp_path / "data.tfrecord"
    write_records(path, records, gzip_it=False)
    out = tmp_path / "examples"
    meta = executor.run(data=str(path), output_dir=str(out), label="label")
    assert meta["label_classes"] == ["0", "1", "2"] and meta["split_key"] == "(serialized record)"
    import tensorflow as tf

    written = [r.numpy() for s in meta["splits"] for r in tf.data.TFRecordDataset(split_files(out, s), "GZIP")]
    assert sorted(written) == sorted(records)
    again = executor.run(data=str(path), output_dir=str(tmp_path / "again"), label="label")
    assert again["splits"] == meta["splits"]


def test_tfrecord_errors(tmp_path: Path):
    import tensorflow as tf

    seq = tf.train.SequenceExample()
    seq.feature_lists.feature_list["tokens"].feature.add().int64_list.value.append(1)
    path = tmp_path / "seq.tfrecord"
    write_records(path, [example_bytes(label=1), seq.SerializeToString()], gzip_it=False)
    with pytest.raises(SlipwayError, match=r"seq.tfrecord: record 1 is not a tf.Example"):
        executor.run(data=str(path), output_dir=str(tmp_path / "o"), label="label")
    write_records(path, [b"\xff\xff\xff not a proto"], gzip_it=False)
    with pytest.raises(SlipwayError, match=r"seq.tfrecord: record 0 is not a tf.Example"):
        executor.run(data=str(path), output_dir=str(tmp_path / "o"), label="label")
    path.write_bytes(b"definitely not a tfrecord file")
    with pytest.raises(SlipwayError, match=r"seq.tfrecord: not a readable TFRecord file"):
        executor.run(data=str(path), output_dir=str(tmp_path / "o"), label="label")
    write_records(path, [example_bytes(y=1), example_bytes(y=2)], gzip_it=False)
    with pytest.raises(SlipwayError, match=r"label feature 'label' not found in any of 2 records \(features: y\)"):
        executor.run(data=str(path), output_dir=str(tmp_path / "o"), label="label")
    with pytest.raises(SlipwayError, match=r"record 0 has no key feature 'id'"):
        executor.run(data=str(path), output_dir=str(tmp_path / "o"), label="y", key="id")
    assert not (tmp_path / "o").exists()


# -- detection -------------------------------------------------------------------------------------------


def test_auto_detection(image_tree: Path, cifar: Path, tmp_path: Path):
    (tmp_path / "t.csv").write_text("a\n1\n")
    (tmp_path / "r.tfrecord.gz").write_bytes(gzip.compress(b""))
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "year=2024").mkdir()
    (tmp_path / "p" / "year=2024" / "x.parquet").write_bytes(b"")
    assert sources.detect_format(str(image_tree)) == "images"
    assert sources.detect_format(str(cifar)) == "cifar10"
    assert sources.detect_format(str(cifar / "test_batch")) == "cifar10"
    assert sources.detect_format(str(tmp_path / "t.csv")) == "csv"
    assert sources.detect_format(str(tmp_path / "r.tfrecord.gz")) == "tfrecord"
    assert sources.detect_format(str(tmp_path / "p")) == "parquet"  # partitioned folders are not class folders
    with pytest.raises(SlipwayError, match="a single image; point data at a folder"):
        sources.detect_format(str(image_tree / "cat" / "c00.png"))
