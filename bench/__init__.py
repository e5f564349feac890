"""Sluice's benchmark suite (``make bench``, ``make bench-quick``): Sluice side by side with the
in-process limit of the same handler and with TorchServe 0.12, same load generator, same payloads.

Modules: ``models`` (TorchScript models and ``.mar`` archives, built in code), ``payloads`` (request
bytes), ``loadgen`` / ``h2load`` (load generators), ``servers`` (in-process, Sluice, TorchServe),
``collectors`` (RSS, CPU, Redis memory), ``profiling`` (py-spy), ``matrix`` / ``presets`` (what
runs), ``head_to_head`` (the two servers' cells in alternating rounds), ``runner`` (runs it),
``cells`` / ``targets`` (repetitions grouped; the issue's targets as data), ``report`` /
``report_costs`` / ``report_format`` / ``report_paired`` / ``plots`` (Markdown and PNG from the raw
JSON lines).

Standalone benchmarks with make targets of their own: ``sequences`` (stateful models), ``containers``
(worker containers against processes), ``autoscale`` (an open-loop step load, ``openloop``, against
autoscaling and fixed workers, and the cold start from zero; ``autoscale_analysis`` /
``autoscale_report`` from its raw JSON lines).
"""
