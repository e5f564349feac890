"""What a benchmark run measures: a preset's sizes (``bench.presets``) expanded into server groups
and load cells. Pure data: no I/O, no torch.

A *group* is one server start with a set of archives loaded together; its cells run against it, every
repetition in turn (repetition outermost, so slow drifts spread over all cells). Sluice gives each
worker ``cores // workers on the host`` torch threads, so each CNN configuration gets a start of its
own; the mlp configurations share one start on both servers.
"""

from dataclasses import dataclass, field, replace

from bench.models import Variant

APIS = ("predictions", "kserve", "rest", "stream")
CLIENTS = ("python", "h2load")
SERVERS = ("sluice", "torchserve")


@dataclass(frozen=True)
class LoadCell:
    api: str
    model: str
    concurrency: int
    duration_s: float
    warmup_s: float
    client: str = "python"
    # matrix | protocols | h2load | queue_depth | idle_models | profile | pinning | paired
    section: str = "matrix"
    pin_client: bool = False

    def __post_init__(self) -> None:
        if self.api not in APIS or self.client not in CLIENTS:
            raise ValueError(f"unknown api/client {self.api}/{self.client}")


@dataclass(frozen=True)
class InprocessWindow:
    """The in-process limit measured between a group's paired cells, its server idle meanwhile."""

    model: str
    batch: int
    duration_s: float
    warmup_s: float


@dataclass(frozen=True)
class Group:
    server: str
    label: str
    variants: tuple[Variant, ...]
    cells: tuple[LoadCell, ...]
    # Load before the cells (TorchServe's JVM needs ~60 s of it to reach its steady speed).
    warmup_s: float = 0.0
    idle_models: int = 0
    soak_s: float = 0.0
    held_streams: int = 0
    # (round, cell or in-process window), run once after the repetitions, in this order.
    paired: tuple[tuple[int, LoadCell | InprocessWindow], ...] = ()

    @property
    def models(self) -> list[str]:
        return [variant.name for variant in self.variants]


# The archive of the C=1 latency target, run head to head by both servers: batching off, one worker.
HEAD_TO_HEAD_BASE = Variant("mlp")


@dataclass(frozen=True)
class HeadToHead:
    """Sluice and TorchServe up at once after all groups, their mlp cells alternating round by round
    (see :mod:`bench.head_to_head`)."""

    rounds: int
    duration_s: float
    warmup_s: float
    # Load before the first round (TorchServe's JVM needs ~60 s of it to reach its steady speed).
    server_warmup_s: float
    # The best cell of a server that ran no matrix cells (the quick preset runs TorchServe only
    # head to head): TorchServe's best with either client in every full run so far.
    default_best: tuple[Variant, int] = (Variant("mlp", batch_size=8, workers=1, policy="fill"), 64)

    def variants(self) -> list[Variant]:
        """The archives the rounds may need besides the groups' own."""
        return [HEAD_TO_HEAD_BASE, self.default_best[0]]


@dataclass(frozen=True)
class Plan:
    name: str
    reps: int
    groups: tuple[Group, ...]
    # (kind, batch sizes, seconds per batch size)
    inprocess: tuple[tuple[str, tuple[int, ...], float], ...]
    cold_start_reps: int = 1
    register_reps: int = 1
    profile_s: float = 0.0
    with_torchserve: bool = True
    with_h2load: bool = True
    # Hard bound on the whole run.
    deadline_s: float = 3 * 3600.0
    stream_messages: int = 20
    stream_gap_ms: float = 1.0
    head_to_head: HeadToHead | None = None

    def without_torchserve(self) -> "Plan":
        return replace(
            self,
            with_torchserve=False,
            groups=tuple(g for g in self.groups if g.server != "torchserve"),
            head_to_head=None,
        )

    def without_h2load(self) -> "Plan":
        groups = tuple(
            replace(g, cells=tuple(c for c in g.cells if c.client != "h2load")) for g in self.groups
        )
        return replace(self, with_h2load=False, groups=groups)

    def variants(self) -> list[Variant]:
        """Every archive the plan needs, once."""
        seen: dict[str, Variant] = {}
        for group in self.groups:
            for variant in group.variants:
                seen.setdefault(variant.name, variant)
        kinds = [kind for kind, _batches, _seconds in self.inprocess]
        kinds += [
            item.model for g in self.groups for _, item in g.paired if isinstance(item, InprocessWindow)
        ]
        for kind in kinds:
            base = Variant(kind)
            seen.setdefault(base.name, base)
        if self.register_reps:
            seen.setdefault(Variant("mlp").name, Variant("mlp"))
        for variant in self.head_to_head.variants() if self.head_to_head else ():
            seen.setdefault(variant.name, variant)
        return list(seen.values())


def mlp(batch: int, workers: int, policy: str = "fill") -> Variant:
    return Variant("mlp", batch_size=batch, max_batch_delay_ms=5, policy=policy, workers=workers)


def cnn(batch: int, workers: int, policy: str = "fill") -> Variant:
    return Variant("cnn", batch_size=batch, max_batch_delay_ms=5, policy=policy, workers=workers)


def stream(messages: int, gap_ms: float) -> Variant:
    return Variant("stream", stream_messages=messages, stream_gap_ms=gap_ms, job_queue_size=2000)


def _cells(
    api: str,
    variants: list[Variant],
    concurrency: tuple[int, ...],
    duration_s: float,
    warmup_s: float,
    client: str = "python",
    section: str = "matrix",
) -> list[LoadCell]:
    return [
        LoadCell(api, variant.name, c, duration_s, warmup_s, client=client, section=section)
        for variant in variants
        for c in concurrency
    ]


@dataclass(frozen=True)
class Sizes:
    """The knobs a preset turns."""

    name: str
    reps: int
    concurrency: tuple[int, ...]
    protocol_concurrency: tuple[int, ...]
    h2load_concurrency: tuple[int, ...]
    queue_depths: tuple[int, ...]
    mlp_s: tuple[float, float]
    cnn_s: tuple[float, float]
    cnn_concurrency: tuple[int, ...]
    ts_warmup_s: float
    soak_s: float
    held_streams: int
    idle_models: int
    profile_s: float
    cold_start_reps: int
    register_reps: int
    deadline_s: float
    mlp_variants: tuple[Variant, ...] = field(default_factory=tuple)
    cnn_variants: tuple[Variant, ...] = field(default_factory=tuple)
    inprocess_s: float = 3.0
    # Rounds of the paired C=1 comparison of batching off and the eager policy (0: none).
    paired_rounds: int = 0
    # Rounds of the paired comparison of the CNN's batched archives with the in-process limit.
    cnn_paired_rounds: int = 0
    # Rounds of Sluice and TorchServe head to head on their mlp cells (0: none).
    head_to_head_rounds: int = 0
    # TorchServe's own groups (mlp, CNN, stream); without them it runs only head to head.
    torchserve_groups: bool = True


def paired_low_load(
    off: Variant, eager: Variant, rounds: int, duration_s: float, warmup_s: float
) -> tuple[tuple[int, LoadCell | InprocessWindow], ...]:
    """C=1 on batching off and on eager, alternating A B, B A, ... on one server start.

    The matrix's C=1 cells of two archives lie minutes apart and are answered by different worker
    processes; over a full run that spread (1.4 to 2.8 ms for one archive) swamps a 10% goal. Short
    alternating rounds put the same drift on both, and the verdict takes the median of each.
    """
    cells: list[tuple[int, LoadCell | InprocessWindow]] = []
    for round_ in range(rounds):
        order = (off, eager) if round_ % 2 == 0 else (eager, off)
        cells += [
            (round_, LoadCell("predictions", v.name, 1, duration_s, warmup_s, section="paired"))
            for v in order
        ]
    return tuple(cells)


def paired_saturation(
    variant: Variant, concurrency: int, rounds: int, duration_s: float, warmup_s: float
) -> tuple[tuple[int, LoadCell | InprocessWindow], ...]:
    """A batched archive at saturation, over TorchServe gRPC and over KServe v2 with raw tensors, and
    the in-process limit at the same batch size, alternating (A B C, C B A, ...) on one server start.

    The limit and the server cells otherwise lie many minutes apart, and this machine's speed moves
    more than the 10% the CNN target leaves (the limit alone spanned 53 to 74 inf/s over one run's
    three repetitions). Alternating windows put the same drift on all.
    """
    window = InprocessWindow(variant.kind, variant.batch_size, duration_s, warmup_s)
    cells = [
        LoadCell(api, variant.name, concurrency, duration_s, warmup_s, section="paired")
        for api in ("predictions", "kserve")
    ]
    pairs: list[tuple[int, LoadCell | InprocessWindow]] = []
    for round_ in range(rounds):
        order: list[LoadCell | InprocessWindow] = [window, *cells]
        pairs += [(round_, item) for item in (order if round_ % 2 == 0 else order[::-1])]
    return tuple(pairs)


def _mlp_group(server: str, sizes: Sizes) -> Group:
    # TorchServe has no batch policy: its batching is `fill`, so the eager archives are Sluice's.
    variants = [v for v in sizes.mlp_variants if server == "sluice" or v.batching != "eager"]
    base = variants[0]
    batched = [v for v in variants if v.batch_size > 1 and v.workers == 1]
    seconds, warm = sizes.mlp_s
    cells = _cells("predictions", variants, sizes.concurrency, seconds, warm)
    protocol_variants = [base, *batched[-1:]]
    for api in ("kserve", "rest") if server == "sluice" else ("rest",):
        cells += _cells(
            api, protocol_variants, sizes.protocol_concurrency, seconds, warm, section="protocols"
        )
    # h2load drives each server's ceiling: every batched archive, with one worker and with two (the
    # Python client's best Sluice cell is a two-worker one).
    cells += _cells(
        "predictions",
        [base, *[v for v in variants if v.batch_size > 1]],
        sizes.h2load_concurrency,
        seconds,
        warm,
        client="h2load",
        section="h2load",
    )
    cells += _cells("predictions", [base], sizes.queue_depths, seconds, warm, section="queue_depth")
    if batched and sizes.reps > 1:
        top = max(sizes.concurrency)
        for pinned in (True, False):
            cells.append(
                LoadCell(
                    "predictions", batched[-1].name, top, seconds, warm, section="pinning", pin_client=pinned
                )
            )
    eager = [v for v in batched if v.batching == "eager"]
    paired = paired_low_load(base, eager[0], sizes.paired_rounds, seconds, warm) if eager else ()
    return Group(
        server,
        "mlp",
        tuple(variants),
        tuple(cells),
        warmup_s=sizes.ts_warmup_s if server == "torchserve" else 0.0,
        paired=paired,
        # Without the idle-model groups, the Redis soak runs on the mlp start.
        soak_s=sizes.soak_s if server == "sluice" and not sizes.idle_models else 0.0,
    )


def _cnn_groups(server: str, sizes: Sizes) -> list[Group]:
    variants = [v for v in sizes.cnn_variants if server == "sluice" or v.batching != "eager"]
    if not variants:
        return []
    seconds, warm = sizes.cnn_s
    # Sluice sizes torch threads by the workers on the host: one start per configuration. TorchServe
    # keeps torch's defaults whatever is loaded, so one start serves them all.
    members = [[v] for v in variants] if server == "sluice" else [variants]
    warmup_s = min(10.0, sizes.ts_warmup_s) if server == "torchserve" else 0.0
    return [
        Group(
            server,
            group[0].name if len(group) == 1 else "cnn",
            tuple(group),
            tuple(_cells("predictions", group, sizes.cnn_concurrency, seconds, warm)),
            warmup_s=warmup_s,
            paired=_cnn_paired(group, sizes) if server == "sluice" else (),
        )
        for group in members
    ]


def _cnn_paired(group: list[Variant], sizes: Sizes) -> tuple[tuple[int, LoadCell | InprocessWindow], ...]:
    """The saturation pairs of a Sluice start serving one batch-filling archive (the one the CNN
    target is about); none for the others."""
    (variant,) = group
    if variant.batch_size == 1 or variant.batching != "fill" or not sizes.cnn_concurrency:
        return ()
    seconds, warm = sizes.cnn_s
    return paired_saturation(variant, max(sizes.cnn_concurrency), sizes.cnn_paired_rounds, seconds, warm)


def _stream_group(server: str, sizes: Sizes) -> Group:
    variant = stream(20, 1.0)
    seconds, warm = sizes.mlp_s
    concurrency = (1, 4) if sizes.reps > 1 else (1,)
    return Group(
        server,
        "stream",
        (variant,),
        tuple(_cells("stream", [variant], concurrency, seconds, warm)),
        held_streams=sizes.held_streams if server == "sluice" else 0,
    )


def _idle_groups(sizes: Sizes) -> list[Group]:
    """mlp alone (with the Redis soak), then mlp beside ``idle_models`` registered idle models."""
    base = sizes.mlp_variants[0]
    seconds, warm = sizes.mlp_s
    cells = tuple(_cells("predictions", [base], (16, 64), seconds, warm, section="idle_models"))
    return [
        Group("sluice", "idle0", (base,), cells, soak_s=sizes.soak_s),
        Group(
            "sluice",
            f"idle{sizes.idle_models}",
            (base, Variant("idle")),
            cells,
            idle_models=sizes.idle_models,
        ),
    ]


def build(sizes: Sizes) -> Plan:
    groups: list[Group] = []
    for server in SERVERS if sizes.torchserve_groups else ("sluice",):
        groups.append(_mlp_group(server, sizes))
        groups += _cnn_groups(server, sizes)
        groups.append(_stream_group(server, sizes))
    if sizes.idle_models:
        groups += _idle_groups(sizes)
    return Plan(
        name=sizes.name,
        reps=sizes.reps,
        groups=tuple(groups),
        inprocess=(("mlp", (1, 8), sizes.inprocess_s), ("cnn", (1, 8), sizes.inprocess_s * 2)),
        cold_start_reps=sizes.cold_start_reps,
        register_reps=sizes.register_reps,
        profile_s=sizes.profile_s,
        deadline_s=sizes.deadline_s,
        head_to_head=(
            HeadToHead(sizes.head_to_head_rounds, *sizes.mlp_s, server_warmup_s=sizes.ts_warmup_s)
            if sizes.head_to_head_rounds
            else None
        ),
    )
