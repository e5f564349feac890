"""The gateway's HTTP listeners, built from its settings and components (used by ``app.Gateway``)."""

from collections.abc import Sequence
from typing import Any

from sluice.transport.http_listener import HttpListener, parse_address
from sluice.transport.tls import rest_context

from sluice_gateway.broker.seam import ClusterReader
from sluice_gateway.dataplane import DataPlane
from sluice_gateway.health import ModelHealth
from sluice_gateway.kserve.generate import GenerateRoutes
from sluice_gateway.kserve.rest import KServeRoutes
from sluice_gateway.kserve.service import KServeService
from sluice_gateway.metrics.http import MetricsRoutes
from sluice_gateway.metrics.inference import InferenceMetrics
from sluice_gateway.registry_cache import VersionResolver
from sluice_gateway.rest_api.server import create_app
from sluice_gateway.sequences import SequenceHeaders
from sluice_gateway.settings import GatewaySettings
from sluice_gateway.torchserve.rest import TorchServeRoutes
from sluice_gateway.workflows.rest import WorkflowRoutes
from sluice_gateway.workflows.service import Workflows


def inference_listener(
    settings: GatewaySettings,
    plane: DataPlane,
    resolver: VersionResolver,
    model_health: ModelHealth,
    kserve: KServeService,
    workflows: Workflows,
    sequence_headers: SequenceHeaders,
    counters: InferenceMetrics,
    middlewares: Sequence[Any] = (),
) -> HttpListener:
    torchserve = TorchServeRoutes(plane, resolver, model_health, sequence_headers)
    routes = [
        *torchserve.routes(),
        *KServeRoutes(kserve).routes(),
        *GenerateRoutes(kserve).routes(),
        *WorkflowRoutes(workflows).routes(),
    ]
    app = create_app(
        routes,
        max_request_size=settings.max_request_size,
        extra_middlewares=middlewares,
        on_prepare=[counters.on_response_prepare],
    )
    address = parse_address(settings.inference_address)
    context = rest_context(settings, settings.inference_address)
    return HttpListener(app, address, name="inference", cancel_on_disconnect=True, ssl_context=context)


def metrics_listener(
    settings: GatewaySettings, inference: InferenceMetrics, reader: ClusterReader
) -> HttpListener:
    app = create_app(
        MetricsRoutes(inference, reader).routes(),
        max_request_size=settings.max_request_size,
        on_prepare=[inference.on_response_prepare],
    )
    return HttpListener(
        app,
        parse_address(settings.metrics_address),
        name="metrics",
        cancel_on_disconnect=True,
        ssl_context=rest_context(settings, settings.metrics_address),
    )
