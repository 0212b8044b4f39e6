"""The router names each request's sender to the model server, for its fair queue."""

from __future__ import annotations

import json
import uuid

from contracts.fairness import ANONYMOUS, custom_attributes, fair_key, key_of
from tests.lambda_proxy.conftest import ALLOWED_ROLE, call, event, invoke_params, model_answer


def _expect(stub, attributes: str) -> None:
    stub.add_response(
        "invoke_endpoint",
        model_answer(),
        invoke_params(attributes=attributes),
    )


def test_each_invocation_names_its_tenant_by_key_in_custom_attributes(router) -> None:
    stub, _ = router
    # The allowed role's tenant, account-qualified; SageMaker forwards CustomAttributes verbatim.
    _expect(stub, custom_attributes("123456789012:clinic-north"))
    text = f"pt c/o sob x3d {uuid.uuid4()}"  # not an answer the shared Redis keeps from a run
    body = {"inputs": text, "parameters": {"max_new_tokens": 8, "do_sample": True}}
    status, out = call(event(body=json.dumps(body), arn=ALLOWED_ROLE))
    assert status == 200, out
    stub.assert_no_pending_responses()


def test_the_key_is_short_ascii_and_hides_the_name() -> None:
    arn = "arn:aws:iam::123456789012:role/" + "p" * 2000  # longer than the header's 1,024
    value = custom_attributes(arn)
    assert len(value) < 1024 and value.isascii() and "123456789012" not in value
    assert key_of(value) == fair_key(arn) != fair_key("another")
    assert key_of(f"trace=1; {value}") == fair_key(arn)  # among other attributes


def test_a_request_without_a_key_shares_the_anonymous_one() -> None:
    assert key_of(None) == key_of("") == key_of("fair-key=") == key_of("other=1") == ANONYMOUS
    assert key_of("fair-key=" + "x" * 65) == ANONYMOUS  # no unbounded key grows the counts
