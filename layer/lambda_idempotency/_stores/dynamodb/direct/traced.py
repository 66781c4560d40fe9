"""The client a tracer's wrapper is given when the direct path calls it (`wire.tracers`).

X-Ray's and OpenTelemetry's wrappers on `BaseClient._make_api_call` read the client they wrap:
X-Ray its service model's endpoint prefix and its region, OpenTelemetry its service model's
name, id and API version, its region and its endpoint URL. The direct path has no client, so
it gives them one as far as a tracer reads it: a `BaseClient` not built by botocore's factory,
whose `meta` is botocore's own `ClientMeta` over botocore's own DynamoDB service model (loaded
once a process, about 35 ms of CPU, and only when a tracer is there) with our default client's
configuration, region and endpoint URL. A wrapper that reads anything else of it fails before
the request is sent: the client makes that call, and every call after it.
"""

from __future__ import annotations

import functools
from typing import Any

from .settings import Settings, partition


@functools.cache
def service_model() -> Any:
    """botocore's DynamoDB service model, as a client of this botocore has it."""
    from botocore.loaders import create_loader
    from botocore.model import ServiceModel

    return ServiceModel(create_loader().load_service_model("dynamodb", "service-2"), "dynamodb")


def client_for_tracers(settings: Settings, events: Any, options: dict[str, Any]) -> Any:
    """A `BaseClient` whose `meta` and service model are a client's, with a botocore Config of
    `options` in the settings' region; nothing else is set."""
    from botocore.client import BaseClient, ClientMeta
    from botocore.config import Config

    model = service_model()
    config = Config(region_name=settings.region, **options)
    client: Any = BaseClient.__new__(BaseClient)
    client.meta = ClientMeta(
        events=events,
        client_config=config,
        endpoint_url=settings.endpoint_url,
        service_model=model,
        method_to_api_mapping={},
        partition=partition(settings.region)["id"],
    )
    client._client_config = config
    return client
