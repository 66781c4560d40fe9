"""The direct path's written-down facts of DynamoDB's model (`_stores.dynamodb.direct.model`)
are the installed botocore's: checked in CI for each botocore the package is tested with
(`make test`'s newest, `make wire-lambda-botocore`'s Lambda runtime one)."""

from __future__ import annotations

from typing import Any

import botocore.session

from lambda_idempotency._stores.dynamodb.direct import model


def _service() -> Any:
    return botocore.session.get_session().get_service_model("dynamodb")


def test_the_protocol_metadata_is_botocores() -> None:
    service = _service()
    assert service.metadata["targetPrefix"] == model.TARGET_PREFIX
    assert model.CONTENT_TYPE.endswith(service.metadata["jsonVersion"])
    assert service.signing_name == model.SIGNING_NAME
    assert service.endpoint_prefix == model.ENDPOINT_PREFIX


def test_each_operations_answer_members_are_botocores() -> None:
    service = _service()
    for method, name in model.OPERATIONS.items():
        operation = service.operation_model(name)
        assert botocore.xform_name(name) == method
        assert tuple(operation.output_shape.members) == model.OUTPUT_MEMBERS[name]
        assert not operation.idempotent_members  # no token for the direct path to fill
        assert operation.http.get("method", "POST") == "POST"
        assert not operation.http_checksum_required and not operation.has_streaming_input


def test_every_modeled_error_reads_the_members_botocore_reads() -> None:
    """Each error shape this botocore knows: our members are its members (a newer table may
    know members an older botocore does not: it keeps them, botocore drops them)."""
    service = _service()
    for name in service.shape_names:
        shape = service.shape_for(name)
        if shape.metadata.get("exception"):
            ours = model.ERROR_MEMBERS.get(name)
            assert ours is not None, name
            assert set(shape.members) <= set(ours), name


def test_the_retryable_errors_are_the_models() -> None:
    service = _service()
    for name in model.OPERATIONS.values():
        operation = service.operation_model(name)
        modeled = {
            shape.name: bool(shape.metadata["retryable"].get("throttling"))
            for shape in operation.error_shapes
            if shape.metadata.get("retryable") is not None
        }
        ours = model.RETRYABLE_ERRORS.get(name, {})
        assert {code: ours.get(code) for code in modeled} == modeled, name
        # an error retried here that this botocore does not list is one it does not know
        unknown = set(ours) - set(modeled)
        assert not unknown & set(service.shape_names), name
