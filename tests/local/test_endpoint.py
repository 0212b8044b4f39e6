"""The local endpoint's base components of their own (``serving: merged``): each invoked on its
own model process, through SageMaker's runtime protocol, as boto3 calls it."""

from __future__ import annotations

import json

import boto3
import httpx
import pytest
from botocore.config import Config

from local.endpoint import LocalEndpoint, create_app
from tests.fakes import HttpEndpoint, served


def _answer(text: str):
    def respond(calls: int, body: bytes) -> tuple[int, dict[str, str], bytes]:
        return 200, {}, json.dumps({"generated_text": text, "finish_reason": "stop"}).encode()

    return respond


def test_a_merged_component_is_served_by_its_own_process(tmp_path) -> None:
    base, own = HttpEndpoint(_answer("from the base")), HttpEndpoint(_answer("from the merged"))
    endpoint = LocalEndpoint(
        name="lora-local-endpoint",
        base_component="lora-local-base",
        runtime_url=base.url,
        work_dir=tmp_path,
    )
    try:
        with served(create_app(endpoint)) as url:
            declared = httpx.put(
                f"{url}/_local/components",
                json={
                    "adapters": [],
                    "models": [{"component": "lora-local-notes-merged", "url": own.url}],
                },
            )
            assert declared.status_code == 200, declared.text
            client = boto3.client(
                "sagemaker-runtime",
                endpoint_url=url,
                region_name="us-east-1",
                aws_access_key_id="x",
                aws_secret_access_key="x",
                config=Config(retries={"total_max_attempts": 1}),
            )

            def ask(component: str) -> str:
                resp = client.invoke_endpoint(
                    EndpointName="lora-local-endpoint",
                    InferenceComponentName=component,
                    ContentType="application/json",
                    Body=b'{"inputs": "hi"}',
                )
                return json.loads(resp["Body"].read())["generated_text"]

            assert ask("lora-local-notes-merged") == "from the merged"
            assert ask("lora-local-base") == "from the base"
            assert (own.calls, base.calls) == (1, 1)
            # Declared away: the component is gone, as SageMaker answers for an unknown one.
            httpx.put(f"{url}/_local/components", json={"adapters": [], "models": []})
            with pytest.raises(client.exceptions.ValidationError, match="not found"):
                ask("lora-local-notes-merged")
    finally:
        base.close()
        own.close()
