"""Serving: TF Serving's model layout (layout.py), KServe's model server on a SavedModel (server.py, run in the
serving environment), starting and stopping it (process.py) and a plain-HTTP V1 client (client.py).

server.py runs in an environment of its own (.venv-serving, images/serving): kserve cannot share the pipeline
environment's pins. It may import slipway.core.errors and slipway.core.storage, nothing heavier.
"""
