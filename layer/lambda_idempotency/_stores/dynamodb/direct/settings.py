"""Where the direct path sends, as whom, and how: read from the environment alone, as Lambda
configures a function, or a reason to let a botocore client do it.

A client reads the same settings through a botocore session, whose credential chain and
configuration store cost a cold start ~15 ms of CPU to build. In Lambda everything they would
find is in environment variables: the region, the credentials (or, with SnapStart, the
container credentials endpoint), an endpoint URL if one is set. So the direct path serves when
the environment decides every setting the way botocore's chain would; anything that needs more
(a config or credentials file, a profile, web identity, FIPS or dual-stack endpoints,
account-based endpoints, a table named by its ARN) is a reason, and the client serves.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .model import ENDPOINT_PREFIX

TRUE = ("true",)
"""botocore's `ensure_boolean` for environment values: 'true' in any case, nothing else."""
REGION = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
ENDPOINT_URL = re.compile(
    r"https?://(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?(?:/[^\s?#%]*)?"
)
"""An endpoint URL botocore takes as it is: a host name (no `_`, no escapes) or an IPv6
literal, a port, a path; anything else (userinfo, a query) is left to the client."""
FILES = (
    ("AWS_CONFIG_FILE", "~/.aws/config"),
    ("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"),
    ("BOTO_CONFIG", "~/.boto"),
    ("AWS_CREDENTIAL_FILE", None),
)
"""Files botocore's chain and configuration read before the container credentials; their
settings (a profile's region, endpoint URL, credentials, retry or FIPS settings) only a
session reads."""
ENVIRONMENT_ONLY_UNSUPPORTED = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_DATA_PATH",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_AUTH_SCHEME_PREFERENCE",
)
"""Environment variables whose meaning only a botocore session gives."""


@dataclass(frozen=True)
class Settings:
    """Everything the direct path needs that a client would read from its configuration."""

    region: str
    url: str
    """Where requests go: `https://dynamodb.<region>.<partition's DNS suffix>/`, or the
    endpoint URL configured."""
    credentials: Any
    """botocore's credentials object (refreshed as botocore refreshes them)."""
    verify: bool | str
    proxies: dict[str, str]
    keepalive: bool
    endpoint_url: str = ""
    """What a client would give as `meta.endpoint_url`: the endpoint URL configured, as it was
    given, or the regional one (what a tracer records as the server's address)."""


def environment_settings(
    endpoint_url: str | None,
    region_name: str | None,
    table_name: str | None,
    environ: Mapping[str, str] = os.environ,
) -> Settings | str:
    """The settings a botocore client would use, when the environment alone decides them; else
    why not (the client then serves)."""
    for name in ENVIRONMENT_ONLY_UNSUPPORTED:
        if environ.get(name):
            return f"{name} is set"
    for name, default in FILES:
        path = environ.get(name) or default
        if path is not None and Path(path).expanduser().exists():
            return f"a configuration file ({name})"
    for name in ("AWS_USE_FIPS_ENDPOINT", "AWS_USE_DUALSTACK_ENDPOINT"):
        if environ.get(name, "").lower() in TRUE:
            return f"{name} is set"
    if table_name is not None and table_name.startswith("arn:"):
        return "a table named by its ARN"
    if environ.get("AWS_DEFAULT_REGION") == "" or environ.get("AWS_CA_BUNDLE") == "":
        return "an empty AWS_DEFAULT_REGION or AWS_CA_BUNDLE"  # botocore reads them its own way
    region = region_name or environ.get("AWS_DEFAULT_REGION") or environ.get("AWS_REGION")
    if not region or not REGION.fullmatch(region) or "fips" in region:
        return "no region, or not one the direct path knows (a FIPS pseudo-region)"
    credentials = _credentials(environ)
    if isinstance(credentials, str):
        return credentials
    mode = _account_endpoints(environ)
    if mode not in (None, "preferred", "disabled", "required"):
        return f"an account id endpoint mode botocore refuses ({mode})"
    url = endpoint_url or _configured_endpoint(environ)
    if url is None:
        if region == "local":  # DynamoDB's rules send it to localhost:8000
            return "the region 'local'"
        if mode == "required" or (mode == "preferred" and getattr(credentials, "account_id", None)):
            return "an account-based endpoint"
        url = f"https://{ENDPOINT_PREFIX}.{region}.{_dns_suffix(region)}"
    elif not ENDPOINT_URL.fullmatch(url):
        return "an endpoint URL the direct path does not parse"
    from botocore.utils import get_environ_proxies

    from ..wire.build import _urljoin

    endpoint = url
    url = _urljoin(url)
    return Settings(
        region=region,
        url=url,
        endpoint_url=endpoint,
        credentials=credentials,
        verify=environ.get("AWS_CA_BUNDLE") or environ.get("REQUESTS_CA_BUNDLE") or True,
        proxies=get_environ_proxies(url),
        keepalive=environ.get("BOTOCORE_TCP_KEEPALIVE", "").lower() in TRUE,
    )


def _credentials(environ: Mapping[str, str]) -> Any:
    """botocore's chain, where the environment decides it: its environment provider first
    (Lambda's on-demand and provisioned functions), else its container provider (SnapStart)."""
    from botocore.credentials import ContainerProvider, EnvProvider

    found = EnvProvider(environ=dict(environ)).load()  # PartialCredentialsError as the chain
    if found is not None:
        return found
    if environ.get(ContainerProvider.ENV_VAR) or environ.get(ContainerProvider.ENV_VAR_FULL):
        for path in ("~/.boto", "/etc/boto.cfg"):  # read by the chain before the container
            if Path(path).expanduser().exists():
                return "a boto configuration file"
        found = ContainerProvider(environ=dict(environ)).load()
        if found is not None:
            return found
    return "no credentials in the environment"


def _configured_endpoint(environ: Mapping[str, str]) -> str | None:
    """botocore's configured endpoint URL from the environment (service-specific first)."""
    if environ.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").lower() in TRUE:
        return None
    return environ.get("AWS_ENDPOINT_URL_DYNAMODB") or environ.get("AWS_ENDPOINT_URL") or None


def _account_endpoints(environ: Mapping[str, str]) -> str | None:
    """This botocore's account-based endpoint mode (None: it has none)."""
    from botocore import configprovider

    if "account_id_endpoint_mode" not in configprovider.BOTOCORE_DEFAUT_SESSION_VARIABLES:
        return None  # a botocore from before account-based endpoints
    return environ.get("AWS_ACCOUNT_ID_ENDPOINT_MODE", "preferred")


def _dns_suffix(region: str) -> str:
    """The DNS suffix of the region's partition (what botocore's endpoint rules read)."""
    return str(partition(region)["outputs"]["dnsSuffix"])


def partition(region: str) -> dict[str, Any]:
    """The region's partition, from botocore's own partition data; the `aws` partition for a
    region none lists or matches."""
    import botocore

    data = json.loads((Path(botocore.__file__).parent / "data" / "partitions.json").read_text())
    partitions: list[dict[str, Any]] = data["partitions"]
    for found in partitions:
        if region in found["regions"]:
            return found
    for found in partitions:
        if re.match(found["regionRegex"], region):
            return found
    return next(found for found in partitions if found["id"] == "aws")
