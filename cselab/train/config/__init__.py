"""A method's config: its typed sections, the schema it is checked against, the presets and how one is loaded."""
