"""Example models built from code (imported from the repository root; not an installed package)."""
