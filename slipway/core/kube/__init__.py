"""Kubernetes: the client the launchers call (client.py) and the rights they need (permissions.py), the cluster
settings train, tune and deploy share (cluster.py), the upstream schemas objects are checked against (upstream.py),
and the restart-safe launcher every job kind runs through (launcher/)."""
