"""cselab inside other libraries: :mod:`cselab.integrations.sentence_transformers` (cselab's losses as
sentence-transformers loss modules)."""
