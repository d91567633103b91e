"""Augment stage: builds the cached training corpus (negations, paraphrases, test sets)."""
