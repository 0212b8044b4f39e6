"""The quota's prompt estimate is an upper bound on what a hostile text costs, a chat pays its
template per message, and a Redis blip does not give a tenant a fresh bucket."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from tests.lambda_proxy.conftest import call
from tests.lambda_proxy.doors import (
    ACCOUNT,
    WHO,
    FakeSM,
    answer,
    configure,
    ev,
    table,
)


@pytest.mark.parametrize(
    ("text", "real_tokens"),
    # The real counts, measured with SmolLM2's tokenizer.
    [("8491027365" * 200, 2000), ("😀" * 800, 2400), ("中" * 760, 1600), ("é" * 1100, 2200)],
)
def test_hostile_prompts_are_charged_at_least_their_tokens(r13, text, real_tokens):
    configure(r13, table(), FakeSM(answer()), quota_tokens_per_minute=100_000)
    body = {"inputs": text, "parameters": {"max_new_tokens": 1}}
    assert call(ev("/v1/adapters/m/generate", body, WHO))[0] == 200
    level = float(r13.hget(f"lora:quota:v2:{ACCOUNT}:t:*:tok", "level"))
    assert 100_000 - level - 1 >= real_tokens


def test_a_chat_is_charged_its_template_per_message(r13):
    configure(r13, table(), FakeSM(answer()), quota_tokens_per_minute=100_000)
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": "k"} for i in range(64)]
    body = {"model": "m", "max_tokens": 1, "temperature": 0, "messages": msgs}
    assert call(ev("/v1/chat/completions", body, WHO))[0] == 200
    charged = 100_000 - float(r13.hget(f"lora:quota:v2:{ACCOUNT}:t:*:tok", "level"))
    assert charged >= 441  # the SmolLM2 template's real count for these 64 messages


def test_a_redis_blip_does_not_give_a_tenant_a_fresh_bucket():
    from lambda_proxy.quota import Limits, Quotas

    class Blinking:
        up = True

        def register_script(self, _source: str):
            def run(keys: list[str], args: list[Any]) -> list[int]:
                if not self.up:
                    raise redis.ConnectionError("blip")
                return [0, 0]

            return run

    blinking = Blinking()
    quotas = Quotas(blinking, Limits(requests_per_minute=5))  # type: ignore[arg-type]
    assert all(quotas.check("t", "m", 1, now=100.0).allowed for _ in range(5))
    blinking.up = False
    assert not quotas.check("t", "m", 1, now=100.5).allowed
