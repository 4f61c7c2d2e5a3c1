"""Types, registries and errors shared by every layer (imported by all, imports none of them)."""
