"""Launchers: the one seam between the reconcile loop and whatever runs workers."""
