"""A training run: set up from a method, stepped by the loop, watched by callbacks, saved and resumed."""
