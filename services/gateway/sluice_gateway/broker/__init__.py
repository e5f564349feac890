"""The gateway's side of the broker: admitting jobs to a version's queue and reading their replies."""
