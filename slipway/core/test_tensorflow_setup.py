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
