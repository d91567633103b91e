"""Train stage: contrastive objectives composed from views, negatives, losses and hooks."""
