"""fedbench."""
