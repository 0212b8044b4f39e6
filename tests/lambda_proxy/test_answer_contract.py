"""Only the container contract's fields reach a caller and the cache, whatever a container
sends; a null usage never breaks the OpenAI doors; an older cached answer is read tolerantly."""

from __future__ import annotations

import json

from tests.lambda_proxy.conftest import call
from tests.lambda_proxy.doors import (
    WHO,
    FakeSM,
    answer,
    configure,
    ev,
    table,
)


def test_an_answer_carries_only_the_contracts_fields(r13):
    ans = answer(
        usage={"input_tokens": 3, "output_tokens": 1, "debug": "SECRET"},
        timings_ms={"host": "ip-10-0-3-17.ec2.internal", "engine": 4.0},
    )
    ans["artifact"]["uri"] = "s3://lora-prod-artifacts/m/1/model.tar.gz"
    ans["debug"] = "SECRET"
    configure(r13, table(), FakeSM(ans))
    status, body = call(ev("/v1/adapters/m/generate", {"inputs": "x"}, WHO))
    assert status == 200
    text = json.dumps(body)
    assert "SECRET" not in text and "s3://" not in text and "ec2.internal" not in text, text
    assert body["usage"] == {"input_tokens": 3, "output_tokens": 1}
    assert body["timings_ms"]["engine"] == {"engine": 4.0}
    cached = [json.loads(r13.get(k)) for k in r13.scan_iter("lora:v1:*")]
    assert cached and all("SECRET" not in json.dumps(c) for c in cached)


def test_an_answer_with_a_null_usage_never_breaks_the_openai_doors(r13):
    fake = FakeSM(answer(usage={"input_tokens": None, "output_tokens": 1}))
    configure(r13, table(), fake)
    body = {"inputs": "x", "parameters": {"max_new_tokens": 8}}
    assert call(ev("/v1/adapters/m/generate", body, WHO))[0] == 200
    completion = {"model": "m", "prompt": "x", "max_tokens": 8, "temperature": 0}
    for _ in range(2):
        status, out = call(ev("/v1/completions", completion, WHO))
        assert status == 200, out
        assert out["usage"]["prompt_tokens"] == 0 and out["usage"]["completion_tokens"] == 1


def test_a_cached_answer_from_before_the_check_is_read_tolerantly(r13):
    from lambda_proxy.openai_api import usage

    assert usage({"usage": {"input_tokens": "many", "output_tokens": None}})["total_tokens"] == 0
