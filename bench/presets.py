"""The presets a run can use (``full``, ``quick``, ``smoke``): the sizes each turns, expanded by
:func:`bench.matrix.build` into a plan."""

from dataclasses import replace

from bench.matrix import Group, Plan, Sizes, build, cnn, mlp

FULL = Sizes(
    name="full",
    reps=3,
    concurrency=(1, 4, 16, 64),
    protocol_concurrency=(1, 16, 64),
    h2load_concurrency=(16, 64),
    queue_depths=(1, 2, 4, 8, 16, 32, 64, 128, 256),
    mlp_s=(4.0, 1.0),
    cnn_s=(8.0, 2.0),
    cnn_concurrency=(1, 4, 16, 64),
    ts_warmup_s=60.0,
    soak_s=60.0,
    held_streams=1000,
    idle_models=100,
    profile_s=8.0,
    cold_start_reps=3,
    register_reps=3,
    deadline_s=3 * 3600.0,
    mlp_variants=(
        mlp(1, 1),
        mlp(8, 1, "fill"),
        mlp(8, 1, "eager"),
        mlp(1, 2),
        mlp(8, 2, "fill"),
        mlp(8, 2, "eager"),
    ),
    cnn_variants=(cnn(1, 1), cnn(8, 1, "fill"), cnn(8, 1, "eager"), cnn(1, 2), cnn(8, 2, "fill")),
    inprocess_s=3.0,
    paired_rounds=8,
    cnn_paired_rounds=4,
    head_to_head_rounds=4,
)

# About three minutes: every target measured once; TorchServe only in its lifecycle steps and head to
# head (its own groups are the full preset's), still warmed for 60 s first (warmed for 20 s, and on its
# batch-1 archive alone, its batch-8 archive gave 2,554 req/s in the first round, 4,100 in the
# second); no profiles.
QUICK = Sizes(
    name="quick",
    reps=1,
    concurrency=(1, 16, 64),
    protocol_concurrency=(16,),
    h2load_concurrency=(64,),
    queue_depths=(),
    mlp_s=(1.0, 0.3),
    cnn_s=(2.5, 0.5),
    cnn_concurrency=(16,),
    ts_warmup_s=60.0,
    soak_s=5.0,
    held_streams=1000,
    idle_models=0,
    profile_s=0.0,
    cold_start_reps=1,
    register_reps=1,
    deadline_s=600.0,
    mlp_variants=(mlp(1, 1), mlp(8, 1, "fill"), mlp(8, 1, "eager")),
    cnn_variants=(cnn(8, 1, "fill"),),
    inprocess_s=0.5,
    paired_rounds=4,
    cnn_paired_rounds=2,
    head_to_head_rounds=2,
    torchserve_groups=False,
)

SMOKE = Sizes(
    name="smoke",
    reps=1,
    concurrency=(1, 4),
    protocol_concurrency=(1,),
    h2load_concurrency=(4,),
    queue_depths=(),
    mlp_s=(0.5, 0.2),
    cnn_s=(0.5, 0.2),
    cnn_concurrency=(),
    ts_warmup_s=0.0,
    soak_s=1.0,
    held_streams=50,
    idle_models=0,
    profile_s=0.0,
    cold_start_reps=0,
    register_reps=0,
    deadline_s=120.0,
    mlp_variants=(mlp(1, 1), mlp(8, 1, "eager")),
    cnn_variants=(),
    inprocess_s=0.3,
    paired_rounds=1,
)


def only(built: Plan, prefixes: list[str]) -> Plan:
    """The groups whose label starts with one of ``prefixes`` (and the matching in-process models);
    cold start and registration only when ``lifecycle`` is among them, head to head only with the
    mlp groups."""
    lifecycle = "lifecycle" in prefixes
    groups = tuple(g for g in built.groups if g.label.startswith(tuple(prefixes)))
    return replace(
        built,
        groups=groups,
        # Head to head picks its cells from both servers' mlp groups.
        head_to_head=built.head_to_head if any(g.label == "mlp" for g in groups) else None,
        inprocess=tuple(item for item in built.inprocess if item[0].startswith(tuple(prefixes))),
        cold_start_reps=built.cold_start_reps if lifecycle else 0,
        register_reps=built.register_reps if lifecycle else 0,
    )


def plan(name: str) -> Plan:
    sizes = {"full": FULL, "quick": QUICK, "smoke": SMOKE}[name]
    built = build(sizes)
    if name == "smoke":
        built = built.without_torchserve().without_h2load()
        # One start serves every smoke cell.
        merged = Group(
            "sluice",
            "smoke",
            tuple(v for g in built.groups for v in g.variants),
            tuple(c for g in built.groups for c in g.cells),
            soak_s=sizes.soak_s,
            held_streams=sizes.held_streams,
            paired=tuple(p for g in built.groups for p in g.paired),
        )
        built = replace(built, groups=(merged,), inprocess=(("mlp", (1,), sizes.inprocess_s),))
    return built
