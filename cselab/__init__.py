"""cselab: a toolkit for contrastive sentence embeddings (augment, train, probe)."""

__version__ = "0.1.0"
