"""What train and tune share to run the trainer on a cluster or in processes: the trainer's command line
(trainer_command.py), the MPIJob kind (mpijob.py, its TerminalRule registered with the launcher) and what Kubernetes
and mpi-operator accept of one (mpijob_checks.py)."""
