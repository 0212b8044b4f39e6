"""The tour's answers keep their inputs' facts: the local platform's trained medical and PII
adapters, served by the runtime on the real base, answer the tour's test inputs (sent as plain
``inputs``, as the tour sends them) with the age, sex and durations kept, and no personal data.

The adapters are what ``make up`` (or ``python -m training.train_all``) trains, about an hour on
two cores; where they have not been trained yet (a fresh clone, CI), there is nothing to check.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from config import load_deployment
from training import datasets
from training.metrics import faithfulness, pii_example

ROOT = Path(__file__).resolve().parents[2]
ADAPTERS = ROOT / ".artifacts" / "adapters"
TOUR = ("medical-shorthand-r64", "medical-shorthand-r8", "pii-redaction")


def _trained(dep) -> list[str]:
    """The tour's adapters whose archive was trained for this catalog entry and base."""
    from local.platform import cached_adapter

    base = ROOT / ".artifacts" / "base" / dep.base_key / "base_manifest.json"
    if not base.exists():
        return []
    manifest = json.loads(base.read_text())
    return [n for n in TOUR if cached_adapter(dep, n, ADAPTERS, manifest, None) is None]


def test_the_tours_medical_and_pii_answers_keep_their_facts(tmp_path: Path) -> None:
    from runtime.engine import Engine
    from runtime.request import GenParams, GenRequest
    from runtime.settings import Settings

    dep = load_deployment("local")
    names = _trained(dep)
    if not names:
        pytest.skip("the local adapters are not trained here yet (make up trains them)")
    engine = Engine(Settings(model_dir=ROOT / ".artifacts" / "base" / dep.base_key,
                             work_dir=tmp_path / "work"))  # fmt: skip
    engine.start()
    try:
        for name in names:
            with tarfile.open(ADAPTERS / f"{name}.tar.gz") as tar:
                tar.extractall(tmp_path / name, filter="data")
            engine.cache.register(engine.cache.validate(name, tmp_path / name), pin=False)
        for name in names:
            entry = dep.adapter(name).entry
            sample = datasets.load(entry.task, entry.dataset_seed).test[0]
            record = engine.cache.get(name)
            req = GenRequest(adapter=name, input_ids=engine.encode(sample.raw, None, record.prompt),
                             params=GenParams(max_new_tokens=96))  # fmt: skip
            out = engine.wait(engine.submit(req), timeout=600)["generated_text"]
            if entry.task == "pii_redaction":
                leaked, _ = pii_example(out, sample.label, json.loads(sample.note))
                assert leaked == 0, f"{name} leaked personal data: {out!r}"
            else:
                assert faithfulness(out, sample.facts) == 1.0, (name, sample.facts, out)
    finally:
        engine.stop()
