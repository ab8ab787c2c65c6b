"""API tokens kept as a digest: the key is shown once, when made, and never stored."""
