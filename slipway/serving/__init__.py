"""Serving: TF Serving's model layout (layout.py), KServe's model server on a SavedModel (server.py, run in the
serving environment), starting and stopping it (process.py) and a plain-HTTP V1 client (client.py).

server.py (the server's command line and process) and the modules it runs on, model.py (the kserve.Model),
rest.py (kserve's REST server, adjusted), protocol.py (V1 and V2 bodies), savedmodel.py (a loaded version) and
batching.py, run in an environment of their own (.venv-serving, images/serving): kserve cannot share the pipeline
environment's pins. They may import slipway.core.errors and slipway.core.storage, nothing heavier.
"""
