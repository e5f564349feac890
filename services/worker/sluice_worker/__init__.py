"""The Sluice worker: serves one model version. It loads the archive with TorchServe's own ``ts``
package, reads batches of jobs from the version's Redis stream, runs the handler off the event loop
and replies to each job's gateway (see docs/design.md, "Worker process")."""
