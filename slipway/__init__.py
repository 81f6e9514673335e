"""Slipway: Kubeflow Pipelines components from raw data to a served model."""

import importlib.util
import os

# TFT and TFMA need Keras 2 (tf-keras); with Keras 3 SavedModel export fails. This must be set before anything
# imports tensorflow, and every Slipway entry point imports this package first. Only where tf-keras is installed:
# the serving environment has none (it loads SavedModels, no Keras), and there the variable made tensorflow-io's
# import fail ("Keras cannot be imported"), so a model server could not read an s3:// base. Without tf-keras the
# variable can only break imports, so one inherited from a pipeline process (a step starting the server) goes.
if importlib.util.find_spec("tf_keras") is not None:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
else:
    os.environ.pop("TF_USE_LEGACY_KERAS", None)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

__version__ = "0.1.0"
