"""Reading a SAM `template.yaml` for local work: functions, their environment, the table.

Local runs take handler, code location, timeout, environment and table definition from the
same template that deploys, so what runs on a laptop is what ships.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._base.errors import ConfigurationError

TABLE_TYPE = "AWS::DynamoDB::Table"
FUNCTION_TYPE = "AWS::Serverless::Function"
LAYER_TYPE = "AWS::Serverless::LayerVersion"
CACHE_TYPE = "AWS::ElastiCache::ServerlessCache"


@dataclass(frozen=True)
class FunctionSpec:
    logical_id: str
    handler: str
    code_dir: Path
    timeout_seconds: int
    memory_mb: int
    environment: dict[str, str]
    layer_dirs: list[Path] = field(default_factory=list)
    durable_timeout_seconds: int | None = None
    """`DurableConfig.ExecutionTimeout` of a durable function: invoked locally through the
    Durable Execution SDK's own runner, as one execution per event."""
    runtime: str | None = None
    """`Runtime`, e.g. python3.13: local runs use this interpreter whatever it says."""
    valkey_variables: tuple[str, ...] = ()
    """Environment variables built from a Valkey cache of the template (its endpoint, e.g.
    IDEMPOTENCY_VALKEY_URL): local runs point them at a local Valkey server."""


@dataclass(frozen=True)
class TableSpec:
    logical_id: str
    name: str
    key_schema: list[dict[str, str]]
    attribute_definitions: list[dict[str, str]]
    ttl_attribute: str | None
    create_options: dict[str, Any] = field(default_factory=dict)
    """CreateTable's other arguments, from the template's properties DynamoDB Local keeps:
    BillingMode (on demand when the template gives neither it nor ProvisionedThroughput),
    ProvisionedThroughput, OnDemandThroughput, DeletionProtectionEnabled,
    StreamSpecification, GlobalSecondaryIndexes, LocalSecondaryIndexes."""
    not_kept: tuple[str, ...] = ()
    """The template's properties DynamoDB Local accepts but does not keep, or has no call
    for (PointInTimeRecoverySpecification, SSESpecification, Tags, TableClass, ...): not
    applied locally, and `local` names them."""
    unresolved: tuple[str, ...] = ()
    """Properties whose value is a CloudFormation function (`!If`, `!Ref` to a parameter):
    not applied locally either, and named."""


def _load_yaml(path: Path) -> dict[str, Any]:
    try:
        import yaml
    except ModuleNotFoundError as exc:
        from .extras import missing_extra

        raise missing_extra(exc, f"reading {path.name}") from exc

    class CloudFormationLoader(yaml.SafeLoader):
        """Reads `!Ref X` as {"Ref": X}, `!GetAtt A.B` as {"Fn::GetAtt": [A, B]}, and so on."""

    def intrinsic(loader: yaml.SafeLoader, tag_suffix: str, node: yaml.Node) -> Any:
        name = "Ref" if tag_suffix == "Ref" else f"Fn::{tag_suffix}"
        if isinstance(node, yaml.ScalarNode):
            value: Any = loader.construct_scalar(node)
            if tag_suffix == "GetAtt":
                value = str(value).split(".", 1)
        elif isinstance(node, yaml.SequenceNode):
            value = loader.construct_sequence(node, deep=True)
        else:
            value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
        return {name: value}

    CloudFormationLoader.add_multi_constructor("!", intrinsic)
    with path.open(encoding="utf-8") as stream:
        document = yaml.load(stream, Loader=CloudFormationLoader)
    if not isinstance(document, dict) or "Resources" not in document:
        raise ConfigurationError(f"{path} is not a SAM/CloudFormation template (no Resources)")
    return document


class Template:
    """A SAM template, with the few CloudFormation intrinsics local runs need resolved."""

    def __init__(self, path: str | Path = "template.yaml") -> None:
        self.path = Path(path).resolve()
        if not self.path.is_file():
            raise ConfigurationError(f"no template at {path}")
        self.root = self.path.parent
        self.document = _load_yaml(self.path)
        self.resources: dict[str, dict[str, Any]] = self.document["Resources"]

    def of_type(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {
            logical_id: resource
            for logical_id, resource in self.resources.items()
            if resource.get("Type") == resource_type
        }

    def table(self, logical_id: str | None = None) -> TableSpec:
        tables = self.of_type(TABLE_TYPE)
        if logical_id is None:
            if len(tables) != 1:
                raise ConfigurationError(f"{len(tables)} DynamoDB tables in the template; name one")
            logical_id = next(iter(tables))
        if logical_id not in tables:
            known = ", ".join(tables) or "none"
            raise ConfigurationError(
                f"no DynamoDB table {logical_id!r} in {self.path.name} (tables: {known})"
            )
        properties = tables[logical_id].get("Properties", {})
        ttl = properties.get("TimeToLiveSpecification") or {}
        options, not_kept, unresolved = _local_options(properties)
        return TableSpec(
            logical_id=logical_id,
            name=self._table_name(logical_id),
            key_schema=properties["KeySchema"],
            attribute_definitions=properties["AttributeDefinitions"],
            ttl_attribute=ttl.get("AttributeName") if _flag(ttl.get("Enabled")) else None,
            create_options=options,
            not_kept=not_kept,
            unresolved=unresolved,
        )

    def idempotency_table(self) -> TableSpec:
        """The table the functions' IDEMPOTENCY_TABLE points at (Globals or any function)."""
        environments = [self.document.get("Globals", {}).get("Function", {})]
        environments += [r.get("Properties", {}) for r in self.of_type(FUNCTION_TYPE).values()]
        for properties in environments:
            variables = properties.get("Environment", {}).get("Variables", {})
            reference = variables.get("IDEMPOTENCY_TABLE")
            if isinstance(reference, dict) and reference.get("Ref") in self.of_type(TABLE_TYPE):
                return self.table(reference["Ref"])
        raise ConfigurationError(
            "no function's IDEMPOTENCY_TABLE refers to a table of the template"
        )

    def tables(self) -> list[TableSpec]:
        return [self.table(logical_id) for logical_id in self.of_type(TABLE_TYPE)]

    def functions(self) -> dict[str, FunctionSpec]:
        return {logical_id: self.function(logical_id) for logical_id in self.of_type(FUNCTION_TYPE)}

    def function(self, logical_id: str) -> FunctionSpec:
        functions = self.of_type(FUNCTION_TYPE)
        if logical_id not in functions:
            known = ", ".join(sorted(functions)) or "none"
            raise ConfigurationError(
                f"no function {logical_id!r} in {self.path.name} (functions: {known})"
            )
        defaults = self.document.get("Globals", {}).get("Function", {})
        properties = functions[logical_id].get("Properties", {})

        def setting(name: str, default: Any = None) -> Any:
            return properties.get(name, defaults.get(name, default))

        environment = {
            **defaults.get("Environment", {}).get("Variables", {}),
            **properties.get("Environment", {}).get("Variables", {}),
        }
        valkey = tuple(name for name, value in environment.items() if self._names_cache(value))
        layers = [
            self.root / self.resources[layer["Ref"]]["Properties"]["ContentUri"]
            for layer in setting("Layers", [])
            if isinstance(layer, dict) and layer.get("Ref") in self.resources
        ]
        return FunctionSpec(
            logical_id=logical_id,
            handler=str(setting("Handler")),
            code_dir=self.root / str(setting("CodeUri", ".")),
            timeout_seconds=int(setting("Timeout", 3)),
            memory_mb=int(setting("MemorySize", 128)),
            environment={
                name: "" if name in valkey else self._resolve(value)
                for name, value in environment.items()
            },
            layer_dirs=layers,
            durable_timeout_seconds=_durable_timeout(setting("DurableConfig")),
            runtime=None if setting("Runtime") is None else str(setting("Runtime")),
            valkey_variables=valkey,
        )

    def _names_cache(self, value: Any) -> bool:
        """Whether a value is built from a Valkey cache's attributes (`!GetAtt Cache.Endpoint
        .Address`, `!Sub rediss://${Cache.Endpoint.Address}:...`): no local meaning."""
        caches = self.of_type(CACHE_TYPE)
        if not isinstance(value, dict) or not caches:
            return False
        if "Fn::GetAtt" in value:
            return value["Fn::GetAtt"][0] in caches
        if "Fn::Sub" in value:
            text = value["Fn::Sub"]
            text = text[0] if isinstance(text, list) else text
            return any(f"${{{cache}." in str(text) for cache in caches)
        return False

    def _table_name(self, logical_id: str) -> str:
        """Locally a table is named by its TableName when literal, else by its logical id."""
        name = self.resources[logical_id].get("Properties", {}).get("TableName")
        return name if isinstance(name, str) else logical_id

    def _resolve(self, value: Any) -> str:
        if isinstance(value, dict) and "Ref" in value:
            target = value["Ref"]
            if self.resources.get(target, {}).get("Type") == TABLE_TYPE:
                return self._table_name(target)
            return str(target)
        if isinstance(value, dict):
            raise ConfigurationError(f"cannot resolve {value} for a local run")
        return str(value)


def _durable_timeout(config: Any) -> int | None:
    if not isinstance(config, dict) or not isinstance(config.get("ExecutionTimeout"), int):
        return None
    return int(config["ExecutionTimeout"])


_OWN_PROPERTIES = ("TableName", "KeySchema", "AttributeDefinitions", "TimeToLiveSpecification")
"""Read into TableSpec's own fields."""
_INDEX_KEYS = (
    "IndexName",
    "KeySchema",
    "Projection",
    "ProvisionedThroughput",
    "OnDemandThroughput",
)
"""What an index keeps on DynamoDB Local (its ContributorInsightsSpecification and
WarmThroughput it does not)."""


def _is_function(value: Any) -> bool:
    """A CloudFormation function somewhere in the value (`{"Ref": ...}`, `{"Fn::If": ...}`)."""
    if isinstance(value, dict):
        if (len(value) == 1 and next(iter(value)) in ("Ref", "Condition")) or any(
            str(key).startswith("Fn::") for key in value
        ):
            return True
        return any(_is_function(item) for item in value.values())
    if isinstance(value, list):
        return any(_is_function(item) for item in value)
    return False


def _flag(value: Any) -> bool:
    """A CloudFormation boolean: true, or the string "true" (any case)."""
    return value is True or (isinstance(value, str) and value.lower() == "true")


def _throughput(value: dict[str, Any]) -> dict[str, int]:
    return {name: int(units) for name, units in value.items()}


def _index(index: dict[str, Any], not_kept: list[str], kind: str) -> dict[str, Any]:
    kept = {name: index[name] for name in _INDEX_KEYS if name in index}
    for name in ("ProvisionedThroughput", "OnDemandThroughput"):
        if name in kept:
            kept[name] = _throughput(kept[name])
    not_kept += [f"{kind}.{name}" for name in index if name not in _INDEX_KEYS]
    return kept


def _is_off(name: str, value: Any) -> bool:
    """A property DynamoDB Local does not keep, but set as a table without it is: nothing
    to name."""
    if name == "PointInTimeRecoverySpecification":
        return not _flag(value.get("PointInTimeRecoveryEnabled"))
    if name == "SSESpecification":
        return not _flag(value.get("SSEEnabled"))
    if name == "ContributorInsightsSpecification":
        return not _flag(value.get("Enabled"))
    if name == "TableClass":
        return bool(value == "STANDARD")
    return bool(value in (None, [], {}))


def _local_options(
    properties: dict[str, Any],
) -> tuple[dict[str, Any], tuple[str, ...], tuple[str, ...]]:
    """CreateTable's other arguments from a table's properties, the properties DynamoDB
    Local does not keep, and those set by a function a local run does not resolve. Found by
    trying each on DynamoDB Local (tests/integration/test_local_table_properties.py)."""
    options: dict[str, Any] = {}
    not_kept: list[str] = []
    unresolved: list[str] = []
    for name, value in properties.items():
        if name in _OWN_PROPERTIES:
            continue
        if _is_function(value):
            unresolved.append(name)
        elif name == "BillingMode":
            options["BillingMode"] = str(value)
        elif name in ("ProvisionedThroughput", "OnDemandThroughput"):
            options[name] = _throughput(value)
        elif name == "DeletionProtectionEnabled":
            options[name] = _flag(value)
        elif name == "StreamSpecification":
            options[name] = {"StreamEnabled": True, "StreamViewType": value["StreamViewType"]}
            if "ResourcePolicy" in value:
                not_kept.append("StreamSpecification.ResourcePolicy")
        elif name in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes"):
            options[name] = [_index(index, not_kept, name) for index in value]
        elif not _is_off(name, value):
            not_kept.append(name)
    if "BillingMode" not in options:
        # CloudFormation's default is PROVISIONED, which needs ProvisionedThroughput
        provisioned = "ProvisionedThroughput" in options
        options["BillingMode"] = "PROVISIONED" if provisioned else "PAY_PER_REQUEST"
    if options["BillingMode"] != "PROVISIONED":
        options.pop("ProvisionedThroughput", None)
    return options, tuple(not_kept), tuple(unresolved)
