"""Deployment: the `mlgo cc` drop-in compiler and the shipped pretrained policy."""
