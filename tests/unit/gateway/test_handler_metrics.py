"""Handler metrics on the metrics port: the versions' hashes merged as TorchServe's one registry
holds them, rendered with TorchServe's HELP text, and declared metrics shown before any sample."""

from sluice import handler_metrics as hm
from sluice_gateway.metrics.cluster import VersionStats
from sluice_gateway.metrics.exposition import render
from sluice_gateway.metrics.handler import families

LABELS = (("ModelName", "m"), ("Level", "Model"), ("Hostname", "h"))


def version(name: str, fields: dict[str, str]) -> VersionStats:
    return VersionStats("m", name, 0, 1, {}, handler_metrics=fields)


def test_versions_merge_counters_add_gauges_newest_histograms_add() -> None:
    calls = hm.Series("Calls", hm.COUNTER, "Count", LABELS)
    size = hm.Series("Size", hm.GAUGE, "MB", LABELS)
    latency = hm.Series("Latency", hm.HISTOGRAM, "ms", LABELS)
    one = version(
        "1",
        {
            calls.field(): "2",
            size.field(): hm.gauge_value(20, 5.0),
            latency.field("b0"): "1",
            latency.field(hm.SUM_PART): "0.004",
        },
    )
    two = version(
        "2",
        {
            calls.field(): "3",
            size.field(): hm.gauge_value(10, 7.0),
            latency.field("b14"): "1",
            latency.field(hm.SUM_PART): "30",
        },
    )
    text = render(families([one, two]))
    labels = 'ModelName="m",Level="Model",Hostname="h",'
    assert f"Calls{{{labels}}} 5.0\n" in text
    assert f"Size{{{labels}}} 5.0\n" in text
    assert f'Latency_bucket{{{labels}le="0.005",}} 1.0\n' in text
    assert f'Latency_bucket{{{labels}le="10.0",}} 1.0\n' in text
    assert f'Latency_bucket{{{labels}le="+Inf",}} 2.0\n' in text
    assert f"Latency_count{{{labels}}} 2.0\nLatency_sum{{{labels}}} 30.004\n" in text
    assert (
        "# HELP Calls Torchserve prometheus counter metric with unit: Count\n# TYPE Calls counter\n" in text
    )


def test_a_declared_metric_is_an_empty_family_until_recorded() -> None:
    declared = hm.Series("Pending", hm.HISTOGRAM, "ms", ()).field(hm.DECLARED_PART)
    assert render(families([version("1", {declared: "1"})])) == (
        "# HELP Pending Torchserve prometheus histogram metric with unit: ms\n# TYPE Pending histogram\n"
    )


def test_a_name_keeps_its_first_kind_and_unreadable_fields_are_skipped() -> None:
    counter = hm.Series("Dup", hm.COUNTER, "Count", LABELS)
    gauge = hm.Series("Dup", hm.GAUGE, "ms", (("Other", "x"),))
    fields = {
        counter.field(): "1",
        gauge.field(): hm.gauge_value(1, 2.0),
        "not json": "1",
        counter.field("x"): "z",
    }
    [family] = families([version("1", fields)])
    assert (family.kind, [sample.value for sample in family.samples]) == ("counter", [1.0])
