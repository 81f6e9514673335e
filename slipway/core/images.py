"""Container images the components run in. One place, pinned by version tag (digests once CI publishes them)."""

# Built from images/runtime/Dockerfile: the project environment from requirements.lock plus slipway itself.
RUNTIME_IMAGE = "ghcr.io/slipway-ml/slipway-runtime:0.1.0"
# Built from images/trainer/Dockerfile: the runtime plus Open MPI, sshd for the MPI Operator, and Horovod.
TRAINER_IMAGE = "ghcr.io/slipway-ml/slipway-trainer:0.1.0"
