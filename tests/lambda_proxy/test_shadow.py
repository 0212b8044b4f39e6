"""The shadow canary through the router: mirrors after the caller's answer, the paired quality
test on them, and its decisions (rollback, promotion), with callers only ever served stable."""

from __future__ import annotations

import collections
import io
import json
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError
from botocore.response import StreamingBody

from contracts.routing import CanaryRoute
from lambda_proxy import service, shadow
from lambda_proxy.cache import ResponseCache
from lambda_proxy.canary import Canaries
from tests.lambda_proxy.conftest import call, event, routed

STABLE, CANARY = "lora-test-medical", "lora-test-medical-canary"

#: What a component answers for a request's text.
Answerer = Callable[[str], str]


class Components:
    """SageMaker runtime as the router calls it: each inference component answers a request's
    text with its own function, names its adapter version, and may block or fail."""

    def __init__(self, answers: dict[str, Answerer], versions: dict[str, str]) -> None:
        self.answers, self.versions = answers, versions
        self.calls: collections.Counter[str] = collections.Counter()
        self.gate: threading.Event | None = None
        self.failing: set[str] = set()
        self._lock = threading.Lock()

    def invoke_endpoint(self, *, InferenceComponentName: str, Body: bytes, **_: Any) -> dict:  # noqa: N803 - boto3's names
        with self._lock:
            self.calls[InferenceComponentName] += 1
        if InferenceComponentName == CANARY and self.gate is not None:
            assert self.gate.wait(30), "the canary was never released"
        if InferenceComponentName in self.failing:
            raise ClientError(
                {"Error": {"Code": "ModelError", "Message": "boom"}, "OriginalStatusCode": 500},
                "InvokeEndpoint",
            )
        payload = json.loads(Body)
        text = shadow.source_text(payload)
        body = json.dumps(
            {
                "generated_text": self.answers[InferenceComponentName](text),
                "finish_reason": "stop",
                "adapter": InferenceComponentName,
                "artifact": {"name": "medical", "version": self.versions[InferenceComponentName]},
            }
        ).encode()
        return {"Body": StreamingBody(io.BytesIO(body), len(body))}


def _canary(version: str, **extra: Any) -> dict[str, Any]:
    return {
        "component": CANARY,
        "version": version,
        "weight": 50,
        "max_error_rate": 0.05,
        "window_s": 300,
        "min_requests": 20,
        "shadow": 0.5,
        "margins": {
            "json_valid": 0.05,
            "facts_kept": 0.05,
            "pii_leaked": 0.02,
            "answered": 0.02,
            "repetition": 0.05,
        },
        "min_pairs": 30,
        "promote_after": 200,
        "promote": "hold",
        **extra,
    }


@pytest.fixture
def version() -> str:
    """A canary version no earlier run has counted in the shared Redis."""
    return f"2.0.0-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def setup(redis_client):
    """Configure the router with a shadow canary and these components' answers."""

    def make(
        canary: dict[str, Any], stable: Answerer, mirrored: Answerer, limit: int = 64, **route: Any
    ) -> Components:
        sm = Components(
            {STABLE: stable, CANARY: mirrored}, {STABLE: "1.0.0", CANARY: canary["version"]}
        )
        cache = ResponseCache(redis_client, ttl_s=60)
        routed(cache, sm, medical={"canary": canary, "cache": "off", **route})
        service.deps().mirrors = shadow.Mirrors(limit)
        return sm

    yield make
    service.configure(None)


def _ask(text: str) -> tuple[int, dict[str, Any]]:
    return call(event(body={"inputs": text, "parameters": {"max_new_tokens": 64}}))


def _switch(version: str, name: str) -> Any:
    base = Canaries.base("medical", CanaryRoute.model_validate(_canary(version)))
    return service.deps().cache.client.get(f"{base}:{name}")


def _emitted(out: str, name: str) -> list[Any]:
    emitted = [json.loads(line) for line in out.splitlines() if '"_aws"' in line]
    values = [m[name] for m in emitted if name in m]
    return [v[0] if isinstance(v, list) else v for v in values]


# -- degraded canaries -----------------------------------------------------------------------

NOTE = "Pt 54 y/o seen by Dr Alvarez on 3 May, BP 140/90, HR 88 bpm, given 5 mg amlodipine."
CONTACT = "Please call Maria Lopez at 555-123-4567 or mail maria.lopez@example.com about it."


def _note(i: int) -> str:
    return NOTE.replace("54", str(30 + i))  # distinct: an input is paired once per test


def _json_record(text: str) -> str:
    return json.dumps({"summary": text[:40], "follow_up": True})


DEGRADED = {
    # A JSON adapter whose output stops validating (cut short: no closing brace).
    "json": (lambda i: _note(i), _json_record, lambda t: _json_record(t)[:-1], "json_valid"),
    # A rewrite adapter that drops the input's facts.
    "facts": (
        lambda i: _note(i),
        lambda t: f"Patient note: {t}",
        lambda t: "Patient seen.",
        "facts_kept",
    ),
    # A redaction adapter that gives the personal values back.
    "leak": (
        lambda i: CONTACT.replace("123", str(100 + i)),
        lambda t: "Please call [NAME] at [PHONE] or mail [EMAIL] about it.",
        lambda t: t,
        "pii_leaked",
    ),
}


@pytest.mark.parametrize("case", sorted(DEGRADED))
def test_a_degraded_canary_is_rolled_back_at_the_first_look_and_callers_get_only_stable(
    setup, version, case, capsys, caplog
) -> None:
    request, stable, broken, signal = DEGRADED[case]
    canary = _canary(version)
    sm = setup(canary, stable, broken)
    answers = []
    for i in range(200):
        status, body = _ask(request(i))
        assert status == 200, body
        answers.append((body["version"], body["output"]))
        # One mirror at a time here, so the count at the decision is exact.
        assert service.deps().mirrors.wait()
    # Every caller saw stable's answer, to its own input.
    assert all(v == "1.0.0" for v, _ in answers)
    assert [o for _, o in answers] == [stable(request(i)) for i in range(200)]
    # Rolled back at the test's first look: min_pairs mirrored requests, and none after.
    assert sm.calls[CANARY] == canary["min_pairs"]
    evidence = json.loads(_switch(version, "off"))
    assert evidence["action"] == "rollback" and evidence["n"] == canary["min_pairs"]
    assert signal in evidence["reason"], evidence
    worst = evidence["signals"][signal]
    assert worst["upper"] < -worst["margin"], worst
    out = capsys.readouterr().out
    assert _emitted(out, "CanaryQualityRollback") == [1.0]
    assert _emitted(out, "CanaryRollback") == [1.0]
    logged = [
        r for r in caplog.records if r.getMessage().startswith("canary rolled back on quality")
    ]
    assert len(logged) == 1 and logged[0].canary_version == version
    assert logged[0].evidence["signals"][signal]["canary_mean"] != worst["stable_mean"]


# -- a canary as good as stable --------------------------------------------------------------


def _sampled(seed: int) -> Answerer:
    """A version that sometimes drops a fact, sometimes cuts its JSON short: the same weights
    under a new version, so both versions draw from the same distribution."""
    rng = random.Random(seed)
    lock = threading.Lock()

    def answer(text: str) -> str:
        with lock:
            r = rng.random()
        if r < 0.05:
            return json.dumps({"summary": "Patient seen."})[:-1]
        if r < 0.2:
            return json.dumps({"summary": text.split(",")[0]})
        return json.dumps({"summary": text})

    return answer


def test_an_identical_canary_is_never_rolled_back_over_200_mirrored_requests(
    setup, version, capsys
) -> None:
    random.seed(7)
    canary = _canary(version, promote="hold")
    sm = setup(canary, _sampled(1), _sampled(2))
    for i in range(500):
        status, body = _ask(_note(i))
        assert status == 200 and body["version"] == "1.0.0", body
        assert service.deps().mirrors.wait()
    assert sm.calls[CANARY] >= 200, sm.calls
    assert _switch(version, "off") is None
    # Nothing decided against it, and nothing served from it: a promotion, had the bounds
    # narrowed inside the margins already, is held as the catalog asks.
    assert _switch(version, "split") is None
    assert _emitted(capsys.readouterr().out, "CanaryQualityRollback") == []


def test_a_canary_not_worse_is_promoted_to_its_split(setup, version, capsys) -> None:
    same = lambda t: f"Patient note: {t}"  # noqa: E731 - the versions answer alike
    canary = _canary(version, promote="split", promote_after=60, weight=50)
    sm = setup(canary, same, same)
    before, after = collections.Counter(), collections.Counter()
    for i in range(1000):
        status, body = _ask(_note(i))
        assert status == 200, body
        (after if _switch(version, "split") else before)[body["version"]] += 1
        assert service.deps().mirrors.wait()
        if sum(after.values()) >= 200:
            break
    evidence = json.loads(_switch(version, "split"))
    # At a look, once the bounds are inside the margins: with no pair differing, the variance
    # floor (one disagreement in n + 2) puts that past promote_after at the smallest margin.
    assert evidence["action"] == "promote" and evidence["n"] >= 60
    assert evidence["n"] % canary["min_pairs"] == 0
    # Before the promotion no caller saw the canary; after it, half of new keys do.
    assert before[version] == 0
    assert 60 <= after[version] <= 140, after
    assert _emitted(capsys.readouterr().out, "CanaryPromoted") == [1.0]
    assert sm.calls[CANARY] > after[version]


def test_the_false_rollback_rate_of_an_identical_canary_is_under_its_alpha() -> None:
    """The sequential test's promise, over many A/A runs of 600 pairs with noisy 0/1 signals:
    wrong rollbacks stay under 1 - confidence (they are far fewer: the margin is there too)."""
    canary = CanaryRoute.model_validate(_canary("9.9.9", margins={"json_valid": 0.0}))
    rng = random.Random(11)
    rolled = 0
    for run in range(400):
        pairs = shadow.Pairs(None)
        for _ in range(600):
            tally = pairs.add(
                f"aa-{run}",
                {"json_valid": float(rng.random() > 0.1)},
                {"json_valid": float(rng.random() > 0.1)},
            )
            decision = shadow.decide(canary, tally)
            if decision is not None and decision.action == "rollback":
                rolled += 1
                break
    assert rolled / 400 <= 1 - canary.confidence, rolled


# -- what a mirror may not do ----------------------------------------------------------------


def test_callers_never_wait_for_the_mirror_and_its_load_is_bounded(
    setup, version, monkeypatch, capsys
) -> None:
    monkeypatch.setattr(service.random, "random", lambda: 0.0)  # every request is mirrored
    sm = setup(_canary(version), lambda t: "ok", lambda t: "ok", limit=2)
    sm.gate = threading.Event()  # the canary answers nothing until released
    try:
        for i in range(10):
            status, body = _ask(_note(i))
            assert status == 200 and body["version"] == "1.0.0", body
        # Ten callers answered while the canary was stuck: none waited for it, and only the
        # cap's two mirrors reached it.
        assert sm.calls[CANARY] == 2
    finally:
        sm.gate.set()
    assert service.deps().mirrors.wait()
    out = capsys.readouterr().out
    assert sum(_emitted(out, "ShadowDropped")) == 8
    assert sum(_emitted(out, "ShadowMirrored")) == 2


def test_a_mirror_is_charged_to_no_quota_and_enters_no_cache(
    setup, version, monkeypatch, redis_client
) -> None:
    monkeypatch.setattr(service.random, "random", lambda: 0.0)
    mirrors: list[service.Prepared] = []
    real = service.mirror

    def spy(prep: service.Prepared, stable_answer: str) -> None:
        mirrors.append(prep)
        real(prep, stable_answer)

    monkeypatch.setattr(service, "mirror", spy)
    tenant = f"t-{uuid.uuid4().hex[:6]}"
    sm = setup(
        _canary(version),
        lambda t: "stable",
        lambda t: "canary",
        cache="tenant",
        quota={"requests_per_minute": 6},
        tenants=[tenant],
    )
    statuses = []
    for i in range(6):
        body = {"inputs": _note(i), "parameters": {"max_new_tokens": 16}}
        arn = f"arn:aws:sts::123456789012:assumed-role/{tenant}/session-1"
        status, _ = call(event(body=body, arn=arn))
        statuses.append(status)
        assert service.deps().mirrors.wait()
    # Six requests in a quota of six, each mirrored: had a mirror been charged, the fourth
    # would have been refused.
    assert statuses == [200] * 6
    assert sm.calls[CANARY] == 6 and len(mirrors) == 6
    # The stable answers are cached (deterministic requests, cache on); the canary's are not.
    assert all(service.deps().cache.get(p.key) is None for p in mirrors)


def test_a_mirror_the_canary_container_fails_counts_toward_its_5xx_rollback(
    setup, version, capsys
) -> None:
    canary = _canary(version, min_callers=1)
    sm = setup(canary, lambda t: "ok", lambda t: "ok")
    sm.failing.add(CANARY)
    for i in range(300):
        status, body = _ask(_note(i))
        assert status == 200 and body["output"] == "ok", body
        assert service.deps().mirrors.wait()
    assert sm.calls[CANARY] == canary["min_requests"]
    assert "canary requests failed" in _switch(version, "off").decode()
    assert _emitted(capsys.readouterr().out, "CanaryRollback") == [1.0]


def test_a_shadow_canary_needs_no_weight_but_a_plain_one_does(tmp_path) -> None:
    from config.schema import CanaryConfig

    assert CanaryConfig(version="2.0.0", shadow=0.1).weight == 10
    with pytest.raises(ValueError, match="needs a weight"):
        CanaryConfig(version="2.0.0")
    with pytest.raises(ValueError, match="unknown quality signal"):
        CanaryConfig(version="2.0.0", shadow=0.1, margins={"bleu": 0.1})


# -- the decision in the Model Registry ------------------------------------------------------

GROUP = "lora-test-medical"


class Registry:
    """SageMaker's control plane as the recorder calls it: botocore's Stubber on the real
    service model (it refuses a call or a parameter the API does not have), with the group
    holding the stable and the canary versions' packages as publish registers them."""

    def __init__(self, canary_version: str, fail: str | None = None) -> None:
        import boto3
        from botocore.stub import ANY, Stubber

        self.client = boto3.client(
            "sagemaker",
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        self.stub = Stubber(self.client)
        self.updates: list[dict[str, Any]] = []
        self.client.meta.events.register(
            "provide-client-params.sagemaker.UpdateModelPackage",
            lambda params, **_: self.updates.append(params),
        )
        arns = {
            v: f"arn:aws:sagemaker:us-east-1:123456789012:model-package/{GROUP}/{i}"
            for i, v in enumerate(("1.0.0", canary_version), start=1)
        }
        self.canary_arn = arns[canary_version]
        # Read once by the first request (the decision recorded, if any: none yet), once by
        # the decision, in this order.
        for _lookup in range(2):
            self.stub.add_response(
                "list_model_packages",
                {
                    "ModelPackageSummaryList": [
                        {
                            "ModelPackageArn": arn,
                            "ModelPackageGroupName": GROUP,
                            "CreationTime": "2026-12-01T00:00:00Z",
                            "ModelPackageStatus": "Completed",
                        }
                        # Newest first, as asked: the canary, registered last, is first.
                        for arn in reversed(list(arns.values()))
                    ]
                },
                {
                    "ModelPackageGroupName": GROUP,
                    "ModelPackageType": "Versioned",
                    "SortBy": "CreationTime",
                    "SortOrder": "Descending",
                },
            )
            # Only the canary's package is described: it is the first listed.
            for v, arn in [(canary_version, arns[canary_version])]:
                self.stub.add_response(
                    "describe_model_package",
                    {
                        "ModelPackageName": GROUP,
                        "ModelPackageArn": arn,
                        "CreationTime": "2026-12-01T00:00:00Z",
                        "ModelPackageStatus": "Completed",
                        "ModelPackageStatusDetails": {"ValidationStatuses": []},
                        "ModelApprovalStatus": "Approved",
                        "CustomerMetadataProperties": {"version": v},
                        # As publish registers a shadow canary (training.registry).
                        **(
                            {"ModelLifeCycle": {"Stage": "shadow-canary", "StageStatus": "judging"}}
                            if v == canary_version
                            else {}
                        ),
                    },
                    {"ModelPackageName": arn},
                )
        if fail:
            self.stub.add_client_error("update_model_package", fail, http_status_code=400)
        else:
            self.stub.add_response(
                "update_model_package",
                {"ModelPackageArn": self.canary_arn},
                {
                    "ModelPackageArn": self.canary_arn,
                    "ModelLifeCycle": ANY,
                    "CustomerMetadataProperties": ANY,
                },
            )
        self.stub.activate()


def _valid_for_the_api(update: dict[str, Any]) -> None:
    """The values against the API model's own patterns and lengths (the Stubber checks shapes
    and types, not patterns)."""
    import re

    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")

    def check(shape: str, value: str) -> None:
        meta = model.shape_for(shape).metadata
        assert meta.get("min", 0) <= len(value) <= meta["max"], (shape, value)
        pattern = meta["pattern"]
        if "\\p{" in pattern:  # Java's classes: the metadata's characters, any number of them
            chars = pattern[pattern.index("[") : pattern.index("]*") + 1]
            pattern = chars.replace("\\p{L}", "a-zA-Z").replace("\\p{Z}", " ")
            pattern = pattern.replace("\\p{N}", "0-9") + "*"
        assert re.fullmatch(pattern, value), (shape, value, pattern)

    life = update["ModelLifeCycle"]
    check("EntityName", life["Stage"])
    check("EntityName", life["StageStatus"])
    assert len(life["StageDescription"]) <= 1024
    props = update["CustomerMetadataProperties"]
    assert 1 <= len(props) <= model.shape_for("CustomerMetadataMap").metadata["max"]
    for key, value in props.items():
        check("CustomerMetadataKey", key)
        check("CustomerMetadataValue", value)


@pytest.mark.parametrize(("kind", "status"), [("promote", "promoted"), ("rollback", "rolled-back")])
def test_a_decision_is_recorded_in_the_canary_versions_model_package(
    setup, version, kind, status
) -> None:
    from lambda_proxy.registry import Recorder

    same = lambda t: f"Patient note: {t}"  # noqa: E731
    broken = (lambda t: "Patient seen.") if kind == "rollback" else same
    canary = _canary(version, promote="split", promote_after=60, registry_group=GROUP)
    setup(canary, same, broken)
    reg = Registry(version)
    service.deps().registry = Recorder("us-east-1", reg.client)
    for i in range(1000):
        status_code, body = _ask(_note(i))
        assert status_code == 200, body
        assert service.deps().mirrors.wait()
        if reg.updates:
            break
    reg.stub.assert_no_pending_responses()
    # One record, on the canary version's own package, by the call that decided.
    assert len(reg.updates) == 1
    update = reg.updates[0]
    assert update["ModelPackageArn"] == reg.canary_arn
    assert update["ModelLifeCycle"]["Stage"] == "shadow-canary"
    assert update["ModelLifeCycle"]["StageStatus"] == status
    props = update["CustomerMetadataProperties"]
    decided = json.loads(_switch(version, "split" if kind == "promote" else "off"))
    assert props["shadow-decision"] == status and props["shadow-pairs"] == f"{decided['n']:.0f}"
    facts = decided["signals"]["facts_kept"]
    assert props["shadow-facts_kept"].startswith(
        f"stable {facts['stable_mean']:.3f} canary {facts['canary_mean']:.3f}"
    )
    assert decided["reason"] in update["ModelLifeCycle"]["StageDescription"]
    _valid_for_the_api(update)


def test_a_registry_that_refuses_leaves_the_rollback_in_force(setup, version, capsys) -> None:
    from lambda_proxy.registry import Recorder

    canary = _canary(version, registry_group=GROUP)
    setup(canary, lambda t: f"Patient note: {t}", lambda t: "Patient seen.")
    reg = Registry(version, fail="AccessDeniedException")
    service.deps().registry = Recorder("us-east-1", reg.client)
    for i in range(100):
        status, body = _ask(_note(i))
        assert status == 200 and body["version"] == "1.0.0", body
        assert service.deps().mirrors.wait()
    assert json.loads(_switch(version, "off"))["action"] == "rollback"
    out = capsys.readouterr().out
    assert _emitted(out, "RegistryRecordFailed") == [1.0]
    assert _emitted(out, "CanaryQualityRollback") == [1.0]


# -- one tenant steering the test ------------------------------------------------------------


def test_a_sample_in_which_no_pair_differed_does_not_promote_a_worse_canary() -> None:
    """The canary fails one answer in ten, stable none. With n - 1 variance alone, a sample in
    which no failure happened to fall had no spread, its bound closed on zero, and the canary
    was promoted in 12% of runs (review: 12.2% over 4,000); the variance floor keeps wrong
    promotions under 1 - confidence."""
    canary = CanaryRoute.model_validate(
        _canary("9.9.9", margins={"answered": 0.05}, min_pairs=20, promote_after=20)
    )
    rng = random.Random(5)
    promoted = 0
    runs = 2000
    for run in range(runs):
        pairs = shadow.Pairs(None)
        for _ in range(400):
            tally = pairs.add(
                f"p-{run}", {"answered": 1.0}, {"answered": float(rng.random() > 0.1)}
            )
            decision = shadow.decide(canary, tally)
            if decision is not None and decision.action != "continue":
                promoted += decision.action == "promote"
                break
    assert promoted / runs <= 1 - canary.confidence, promoted


def test_a_canary_that_fails_what_stable_answers_is_judged_on_it(setup, version) -> None:
    """A canary answering 422 to 40% of inputs was promoted on the 60% it answered (review);
    its failures are pairs in which it said nothing."""
    from botocore.exceptions import ClientError

    def flaky(text: str) -> str:
        if hash(text) % 5 < 2:
            raise ClientError(
                {"Error": {"Code": "ModelError", "Message": "no"}, "OriginalStatusCode": 422},
                "InvokeEndpoint",
            )
        return f"Patient note: {text}"

    canary = _canary(version, promote="split", promote_after=60)
    setup(canary, lambda t: f"Patient note: {t}", flaky)
    for i in range(600):
        status, body = _ask(_note(i) + f" #{i}")
        assert status == 200 and body["version"] == "1.0.0", body
        assert service.deps().mirrors.wait()
        if _switch(version, "off"):
            break
    assert _switch(version, "split") is None
    evidence = json.loads(_switch(version, "off"))
    assert evidence["signals"]["answered"]["upper"] < -0.02, evidence


def test_one_callers_inputs_decide_nothing_until_another_caller_agrees(setup, version) -> None:
    """One tenant's 30 requests rolled a canary back for everyone (review); a decision needs
    pairs from ``min_callers`` callers, as the 5xx rule does."""
    canary = _canary(version, min_callers=2)
    tenants = ["clinic-north", "clinic-south"]  # named: two voices (a wildcard's roles are one)
    setup(canary, lambda t: f"Patient note: {t}", lambda t: "Patient seen.", tenants=tenants)
    alone = "arn:aws:sts::123456789012:assumed-role/clinic-north/session-1"
    other = "arn:aws:sts::123456789012:assumed-role/clinic-south/session-1"
    for i in range(200):
        status, _ = call(event(body={"inputs": _note(i)}, arn=alone))
        assert status == 200
        assert service.deps().mirrors.wait()
    assert _switch(version, "off") is None  # well past the first look: one caller
    for i in range(200):
        status, _ = call(event(body={"inputs": _note(i)}, arn=other))
        assert status == 200
        assert service.deps().mirrors.wait()
        if _switch(version, "off"):
            break
    evidence = json.loads(_switch(version, "off"))
    assert evidence["callers"] == 2 and "from 2 callers" in evidence["reason"]


def test_inputs_without_facts_are_no_evidence_that_a_canary_keeps_them(setup, version) -> None:
    """A canary that drops every fact was promoted on 210 prompts stating none (review):
    ``facts_kept`` is measured only on inputs with a fact, and a promotion needs every
    signal measured."""
    canary = _canary(version, promote="split", promote_after=60, margins={"facts_kept": 0.05,
                     "answered": 0.02, "repetition": 0.05})  # fmt: skip
    setup(canary, lambda t: t, lambda t: "the patient was seen")
    for i in range(400):
        # Distinct inputs (one input is one pair), none stating a fact.
        status, _ = _ask(
            f"the patient was seen and went home, case {chr(97 + i % 26)}{chr(97 + i // 26)}"
        )
        assert status == 200
        assert service.deps().mirrors.wait()
    assert _switch(version, "split") is None and _switch(version, "off") is None
    base = Canaries.base("medical", CanaryRoute.model_validate(canary))
    sums = service.deps().cache.client.hgetall(f"{base}:pairs")
    assert int(sums[b"n"]) >= 150 and b"n:facts_kept" not in sums


def test_a_decision_redis_did_not_take_is_not_counted_but_holds_here(
    setup, version, capsys, monkeypatch
) -> None:
    """A failed SET of the off switch counted the rollback, and the next look counted it
    again (review). Now it is counted when Redis takes it; this process keeps the canary off
    meanwhile."""
    import redis as redis_lib

    canary = _canary(version)
    sm = setup(canary, lambda t: f"Patient note: {t}", lambda t: "Patient seen.")
    client = service.deps().canaries._client
    real = client.set

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise redis_lib.ConnectionError("away")

    monkeypatch.setattr(client, "set", refuse)
    for i in range(100):
        status, body = _ask(_note(i))
        assert status == 200 and body["version"] == "1.0.0"
        assert service.deps().mirrors.wait()
    out = capsys.readouterr().out
    assert _emitted(out, "CanaryDecisionUnstored") == [1.0]
    assert _emitted(out, "CanaryQualityRollback") == []
    # Off here: no mirror after the unstored decision, though Redis says nothing of it.
    assert sm.calls[CANARY] == canary["min_pairs"]
    assert _switch(version, "off") is None
    monkeypatch.setattr(client, "set", real)


def test_a_mirror_queues_as_a_sender_of_its_own(setup, version, monkeypatch) -> None:
    """A mirror carried its caller's fair-queue key, so the caller's next request queued behind
    its own mirror (review)."""
    from contracts.fairness import custom_attributes

    monkeypatch.setattr(service.random, "random", lambda: 0.0)
    sm = setup(_canary(version), lambda t: "ok", lambda t: "ok")
    seen: list[tuple[str, str]] = []
    real = sm.invoke_endpoint

    def spy(**kw: Any) -> dict:
        seen.append((kw["InferenceComponentName"], kw.get("CustomAttributes", "")))
        return real(**kw)

    sm.invoke_endpoint = spy  # type: ignore[method-assign]
    _ask(_note(1))
    assert service.deps().mirrors.wait()
    keys = dict(seen)
    assert keys[CANARY] == custom_attributes(service.SHADOW_SENDER)
    assert keys[STABLE] != keys[CANARY]


def test_an_openai_client_sending_only_a_user_turn_is_mirrored_and_judged(setup, version) -> None:
    """What an ``openai`` client sends: a chat completion with one user turn. The pair is
    scored on that turn's text, and the leaking canary is rolled back while every caller gets
    stable's redaction."""
    request, stable, broken, signal = DEGRADED["leak"]
    setup(_canary(version), stable, broken)
    answers = []
    for i in range(120):
        body = {"model": "medical", "messages": [{"role": "user", "content": request(i)}]}
        status, out = call(event(path="/v1/chat/completions", body=body))
        assert status == 200, out
        answers.append(out["choices"][0]["message"]["content"])
        assert service.deps().mirrors.wait()
        if _switch(version, "off"):
            break
    assert set(answers) == {stable("")}
    evidence = json.loads(_switch(version, "off"))
    assert signal in evidence["reason"] and evidence["signals"][signal]["canary_mean"] == 1.0


# -- round five: one voice decides nothing for everyone ----------------------------------------


@pytest.mark.parametrize(
    ("pairs", "voices", "cap"),
    [
        ([40, 1, 1], 3, 1.0),  # the flood weighs what each other voice does
        ([10, 10, 10], 3, 10.0),  # balanced: nothing is weighted down
        ([10, 10], 3, 0.0),  # fewer voices than min_callers: nothing to decide on
        ([100, 50, 50, 50], 3, 75.0),  # each voice at most a third of 225
        ([7], 1, 7.0),  # min_callers 1: one voice may decide, uncapped
    ],
)
def test_no_voice_carries_more_than_its_share(pairs, voices, cap) -> None:
    assert shadow.share_cap(pairs, voices) == pytest.approx(cap)
    weighed = sum(min(p, cap) for p in pairs)
    assert all(min(p, cap) <= weighed / voices + 1e-9 for p in pairs)


def test_one_tenants_flood_of_pairs_cannot_promote_what_two_others_show_broken() -> None:
    """400 identical pairs from one tenant and one pair each from two
    others showing the canary loops promoted it; weighed per voice, the look sees 3 pairs."""
    canary = CanaryRoute.model_validate(
        _canary("9.9.9", min_callers=3, min_pairs=30, promote_after=60, promote="split")
    )
    pairs = shadow.Pairs(None)
    looks = []
    for who in ("south", "east"):
        pairs.add("d1", {"repetition": 0.0}, {"repetition": 0.9}, who, min_callers=3)
    for i in range(400):
        tally = pairs.add(
            "d1", {"repetition": 0.0}, {"repetition": 0.0}, "north", key=f"k{i}",
            every=canary.min_pairs, min_callers=3,
        )  # fmt: skip
        decision = shadow.decide(canary, tally)
        if decision is not None:
            looks.append(decision)
    assert looks and all(d.action == "continue" for d in looks)
    assert looks[-1].n == pytest.approx(3.0) and looks[-1].pairs == 390


def test_a_registry_that_is_away_costs_callers_nothing_after_the_first_wait(
    setup, version, monkeypatch
) -> None:
    """The read-back of a canary's recorded decision (the cache may have lost its switch) is
    tried by one request; when the registry fails, the cache is marked read for a while: later
    requests neither wait for it nor start a read each, until the mark expires."""

    class Away:
        reads = 0

        def decided(self, group: str, version: str) -> str | None:
            Away.reads += 1
            raise RuntimeError("AccessDenied")

    monkeypatch.setattr(service, "READ_BACK_RETRY_S", 1)
    setup(_canary(version, registry_group=GROUP), lambda t: "ok", lambda t: "ok")
    service.deps().registry = Away()  # type: ignore[assignment]
    for i in range(20):
        assert _ask(f"q{i}")[0] == 200
    assert Away.reads == 1  # one read, not one per request
    time.sleep(1.2)
    assert _ask("again")[0] == 200
    assert Away.reads == 2


def test_a_decision_the_cache_lost_is_read_back_before_anything_is_decided(setup, version) -> None:
    """A canary rolled back and recorded: after the cache restarts empty, the next request
    reads the record back before routing, and the canary stays off (a weighted canary served
    half of new keys again, a promoted one dropped back to shadow)."""

    class Recorded:
        def decided(self, group: str, version: str) -> str | None:
            return "rolled-back"

    canary = {k: v for k, v in _canary(version, registry_group=GROUP).items() if k != "shadow"}
    sm = setup(canary, lambda t: "stable", lambda t: "canary")
    service.deps().registry = Recorded()  # type: ignore[assignment]
    versions = set()
    for i in range(10):
        keyed = event(body={"inputs": f"q{i}"})
        keyed["headers"] = {**(keyed.get("headers") or {}), "X-Session-Key": f"k{i}"}
        versions.add(call(keyed)[1]["version"])
    assert versions == {"1.0.0"} and sm.calls[CANARY] == 0
    assert _switch(version, "off") is not None


def _look(canary: CanaryRoute, pairs: list[tuple[str, dict, dict]]) -> shadow.Decision | None:
    """The decision at the last look over these pairs, each ``(voice, stable, canary)``."""
    store = shadow.Pairs(None)
    decision = None
    for i, (who, stable, mirrored) in enumerate(pairs):
        tally = store.add(
            "look", stable, mirrored, who, key=f"k{i}",
            every=canary.min_pairs, min_callers=canary.min_callers,
        )  # fmt: skip
        decision = shadow.decide(canary, tally) or decision
    return decision


def test_a_signal_only_one_voice_can_show_decides_nothing() -> None:
    """Only one tenant's inputs state facts, and the canary drops them there: capped on ``n``
    alone, that tenant carried all of ``facts_kept``."""
    canary = CanaryRoute.model_validate(
        _canary(
            "9.9.9", min_callers=3, min_pairs=30, margins={"facts_kept": 0.05, "answered": 0.02}
        )
    )
    ok = {"answered": 1.0}
    pairs = [(who, ok, ok) for who in ("south", "east") for _ in range(40)]
    pairs += [("north", {"facts_kept": 1.0, **ok}, {"facts_kept": 0.0, **ok})] * 40
    decision = _look(canary, pairs)
    assert decision is not None and decision.action == "continue", decision
    assert next(b for b in decision.bounds if b.signal == "facts_kept").n == 0


def test_a_canary_worse_on_one_voices_inputs_only_is_not_decided_for_everyone() -> None:
    """One tenant's inputs (made for it, or by it) show the canary answering nothing on half of
    them; the two others see it identical. Capped at a third, that still moved the pooled mean
    past the margin; left out in turn, the evidence does not hold."""
    canary = CanaryRoute.model_validate(
        _canary("9.9.9", min_callers=3, min_pairs=30, margins={"answered": 0.02})
    )
    ok, silent = {"answered": 1.0}, {"answered": 0.0}
    pairs = [(w, ok, ok) for w in ("south", "east") for _ in range(30)]
    pairs += [("north", ok, silent if i % 2 else ok) for i in range(300)]
    decision = _look(canary, pairs)
    assert decision is not None and decision.action == "continue" and decision.unheld, decision
    # Broken for every voice: rolled back.
    everyone = [(w, ok, silent) for w in ("south", "east", "north") for _ in range(20)]
    assert (_look(canary, everyone) or decision).action == "rollback"
