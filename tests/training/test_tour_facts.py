"""Trained adapters keep their inputs' facts: the local platform's trained medical and PII
adapters that passed their gate, served by the runtime on the real base, answer a test-split
input (sent as plain ``inputs``, as the tour sends its inputs) with the age, sex and durations
kept, and no personal data. The inputs the tour sends, typed by hand
(``training.datasets.natural``), are scored by ``benchmarks/natural.py``.

The adapters are what ``make up`` (or ``python -m training.train_all``) trains, about an hour on
two cores; where they have not been trained yet (a fresh clone, CI), there is nothing to check.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config import load_deployment
from training import datasets
from training.metrics import faithfulness, pii_example

ROOT = Path(__file__).resolve().parents[2]
ADAPTERS = ROOT / ".artifacts" / "adapters"
TOUR = ("medical-shorthand-r64", "medical-shorthand-r8", "pii-redaction")


def _trained(dep) -> list[str]:
    """The tour's adapters whose archive was trained for this catalog entry and base and
    passed its gate (the tour serves no other)."""
    from training.reuse import trained_here

    return [n for n, ok in trained_here(dep, ROOT / ".artifacts", list(TOUR)).items() if ok]


def test_the_tours_medical_and_pii_answers_keep_their_facts(tmp_path: Path) -> None:
    from tests.runtime.conftest import start_server, stop_server

    dep = load_deployment("local")
    names = _trained(dep)
    if not names:
        pytest.skip("no local medical or PII adapter here passed its gate (make up trains them)")
    server = start_server(
        ROOT / ".artifacts" / "base" / dep.base_key, tmp_path, OPTION_CPU_KVCACHE_GIB="1"
    )
    try:
        for name in names:
            r = server.client.post(
                "/adapters",
                json={"name": name, "src": str(ADAPTERS / dep.base_key / f"{name}.tar.gz")},
            )
            assert r.status_code == 200, r.text
        for name in names:
            entry = dep.adapter(name).entry
            sample = datasets.load(entry.task, entry.dataset_seed).test[0]
            r = server.invoke(name, inputs=sample.raw, parameters={"max_new_tokens": 96})
            out = r.json()["generated_text"]
            if entry.task == "pii_redaction":
                leaked, _ = pii_example(out, sample.label, json.loads(sample.note))
                assert leaked == 0, f"{name} leaked personal data: {out!r}"
            else:
                assert faithfulness(out, sample.facts) == 1.0, (name, sample.facts, out)
    finally:
        stop_server(server)
