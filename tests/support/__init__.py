"""What the tests share besides fixtures: inputs (small Examples folders, a schema and module file, loopback servers,
notebooks), loopback fakes held to the real APIs' contracts (kfp_server, model_registry_server, fake_apiserver with
its testdata/), the real servers the tiers start (kube_apiserver, kfp_cluster, mlflow_server, seaweedfs), the images
(images), the KFP UI's contract (kfp_ui) and a small served model with rows to send it (serving).

Beside the tests, never in the wheel: `tests.support.<name>` from this checkout (the repository root is on sys.path
under pytest, through the root conftest.py)."""
