"""Process-wide TensorFlow settings for the steps that trace Keras code (train, tune's trials, evaluate), and the
memory TensorFlow's traced graphs leave behind, given back between a step's phases (transform, train)."""

from __future__ import annotations

import contextlib
import ctypes
import gc

KERAS_PACKAGE = "tf_keras"


def leave_keras_unconverted() -> None:
    """Make AutoGraph leave the tf_keras package's own code as it is written, as TensorFlow already does for the
    `keras` package.

    With TF_USE_LEGACY_KERAS=1 Keras 2 is the `tf_keras` package, which TensorFlow 2.16's AutoGraph rules
    (tensorflow/python/autograph/core/config.py) predate: every fresh process transpiled Keras's train_function,
    train_step, the functional model's call and the metrics' update_state from source before the first batch
    (taxi: 37 of train's 68 s; see bench/tfx/README.md). Keras's code is graph-safe as written (it is the code
    the `keras` rule already skips), so results do not change; the user's own model code is still converted.
    Idempotent. Uses a private TensorFlow module: test_tensorflow_setup.py fails when it moves.
    """
    from tensorflow.python.autograph.core import config as autograph_config

    rules = autograph_config.CONVERSION_RULES
    if any(isinstance(rule, autograph_config.DoNotConvert) and rule.matches(KERAS_PACKAGE) for rule in rules):
        return
    autograph_config.CONVERSION_RULES = (autograph_config.DoNotConvert(KERAS_PACKAGE), *rules)


def give_back_freed_memory() -> None:
    """Collect the garbage of a finished phase and return the C heap's free pages to the system.

    A step forked from the warm step process collects its oldest objects rarely, and TensorFlow's traced graphs are
    cycles: after transform's analysis (taxi 1x) 52,000 objects were garbage, and glibc kept the pages they freed
    (malloc_trim gave back 54 MiB, which the transform of the splits would otherwise have started from).
    """
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: its allocator keeps what it keeps
        ctypes.CDLL(None).malloc_trim(0)
