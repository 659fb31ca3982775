"""The tests' private Slurm clusters: the project's own script (scripts/slurm_cluster.py), which users run too."""

from scripts.slurm_cluster import Cluster, NodesCluster, free_port, install, netns_reason, wait_for  # noqa: F401
