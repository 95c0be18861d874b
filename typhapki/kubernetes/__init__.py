"""Kubernetes' side: ConfigMaps, Secrets and the env and hostPath wiring."""
