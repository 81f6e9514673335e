"""Slipway: Kubeflow Pipelines components from raw data to a served model."""

import os

# TFT and TFMA need Keras 2 (tf-keras); with Keras 3 SavedModel export fails. This must be set before anything
# imports tensorflow, and every Slipway entry point imports this package first.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

__version__ = "0.1.0"
