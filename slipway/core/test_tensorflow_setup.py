import subprocess
import sys

import slipway  # noqa: F401  (TF_USE_LEGACY_KERAS before tensorflow)
from slipway.core.tensorflow_setup import KERAS_PACKAGE, leave_keras_unconverted


def test_autograph_leaves_keras_code_unconverted_and_still_converts_the_users():
    """Pins the private AutoGraph API leave_keras_unconverted relies on: Keras's train_step is converted by
    TensorFlow's own rules and left alone after the call, a function of ours is still converted, and a second call
    adds no second rule."""
    import tf_keras
    from tensorflow.python.autograph.core import config as autograph_config
    from tensorflow.python.autograph.impl import conversion

    def users_step(x):
        return x + 1

    before = autograph_config.CONVERSION_RULES  # another test in this process may have called it already
    autograph_config.CONVERSION_RULES = tuple(rule for rule in before if not rule.matches(KERAS_PACKAGE))
    try:
        assert not conversion.is_allowlisted(tf_keras.Model.train_step)
        leave_keras_unconverted()
        leave_keras_unconverted()
        assert conversion.is_allowlisted(tf_keras.Model.train_step)
        assert not conversion.is_allowlisted(users_step)
        assert len([rule for rule in autograph_config.CONVERSION_RULES if rule.matches(KERAS_PACKAGE)]) == 1
    finally:
        autograph_config.CONVERSION_RULES = before


PROBE = """
import gc
from slipway.core.tensorflow_setup import give_back_freed_memory

def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

gc.disable()  # as the warm process's copies rarely reach their oldest generation
base = rss_mib()
for _ in range(4000):  # 4,000 cycles holding 64 KiB each (below glibc's mmap threshold: on its heap), 250 MiB
    node = {"data": b"x" * (64 * 1024)}
    node["self"] = node
del node
held = rss_mib()
give_back_freed_memory()
print(base, held, rss_mib())
"""


def test_cyclic_garbage_is_collected_and_its_pages_returned():
    """give_back_freed_memory: garbage kept alive only by cycles is collected and the pages it held go back to the
    system (in a fresh process, as a step forked from the warm process holds such garbage)."""
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    base, held, after = map(float, done.stdout.split())
    assert held - base > 200  # the garbage was resident
    assert after - base < 0.2 * (held - base)  # and most of it is gone
