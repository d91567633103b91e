"""Experiments: what trains and then probes (sweeps), above both stages."""
