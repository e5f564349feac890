"""The model registry: its records, model names, content-addressed artifacts, the readers every
service uses and the manager's one writer."""
