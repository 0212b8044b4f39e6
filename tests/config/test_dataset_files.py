"""A team's own dataset file in the catalog: read, checked record by record, and refused by
``make check`` with the entry, the line and the field named."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from config import CATALOG_PATH, CatalogError, load_catalog, load_deployment
from config.dataset_files import DatasetFileError, read_rows

REAL = yaml.safe_load(CATALOG_PATH.read_text())
ROOT = Path(__file__).resolve().parents[2]
INSTRUCTION = "Answer the customer."


def _records(n: int) -> list[dict]:
    return [
        {
            "input": f"Where is parcel {i}, shipped on day {i % 28}?",
            "output": f"Parcel {i} is on its way.",
        }
        for i in range(n)
    ]


def _distinct(n: int) -> list[dict]:
    """Records no two of which are near-duplicates (a split given with them is clean)."""

    def text(i: int) -> str:
        return "question about " + "".join(chr(97 + (i // 26**k) % 26) for k in range(3))

    return [{"input": text(i), "output": text(i)[::-1]} for i in range(n)]


def _jsonl(path: Path, records: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def _catalog(tmp_path: Path, dataset: str, **fields: object) -> Path:
    data = copy.deepcopy(REAL)
    entry = {
        "name": "own-data",
        "version": "1.0.0",
        "base": "qwen3-4b",
        "task": "answers",
        "instruction": INSTRUCTION,
        "metric": "chrf",
        "dataset": dataset,
        **fields,
    }
    data["adapters"] = [entry]
    path = tmp_path / "adapters.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_the_three_record_shapes_are_read(tmp_path: Path) -> None:
    chat = {
        "messages": [
            {"role": "system", "content": INSTRUCTION},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
        ]
    }
    as_object = {"input": "order 7 late", "output": {"category": "shipping", "order_id": "7"}}
    rows = read_rows(
        _jsonl(tmp_path / "d.jsonl", [chat, as_object, *_records(60)]), instruction=INSTRUCTION
    )
    assert (rows[0].input, rows[0].output) == ("hi", "hello")
    assert json.loads(rows[1].output) == as_object["output"]
    assert len(rows) == 62


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ('{"input": "a", "output": ', "line 3: not JSON"),
        ({"input": "a"}, "line 3: field 'output': missing"),
        ({"input": "", "output": "b"}, "line 3: field 'input': empty"),
        ({"messages": [{"role": "user", "content": "a"}]}, "line 3: field 'messages': roles"),
        ({"input": "a", "output": "b", "split": "dev"}, "line 3: field 'split': 'dev'"),
        (
            {
                "messages": [
                    {"role": "system", "content": "Be rude."},
                    {"role": "user", "content": "a"},
                    {"role": "assistant", "content": "b"},
                ]
            },
            "line 3: field 'messages': its system turn differs",
        ),
    ],
)
def test_a_bad_record_is_named_by_line_and_field(tmp_path: Path, bad, message: str) -> None:
    records = _records(60)
    path = _jsonl(tmp_path / "d.jsonl", [*records[:2], bad, *records[2:]])
    with pytest.raises(DatasetFileError, match=message.replace("(", r"\(")):
        read_rows(path, instruction=INSTRUCTION)


def test_too_few_records_and_mixed_splits_are_refused(tmp_path: Path) -> None:
    with pytest.raises(DatasetFileError, match="fewer than the minimum of 50"):
        read_rows(_jsonl(tmp_path / "few.jsonl", _records(10)))
    mixed = [{**r, "split": "train"} for r in _records(60)] + _records(1)
    with pytest.raises(DatasetFileError, match="line 61: field 'split': missing"):
        read_rows(_jsonl(tmp_path / "mixed.jsonl", mixed))


def test_csv_and_parquet_go_through_datasets(tmp_path: Path) -> None:
    from datasets import Dataset

    table = Dataset.from_list(
        [{**r, "split": "test" if i < 20 else "train"} for i, r in enumerate(_distinct(60))]
    )
    table.to_csv(str(tmp_path / "d.csv"), index=False)
    table.to_parquet(str(tmp_path / "d.parquet"))
    for name in ("d.csv", "d.parquet"):
        rows = read_rows(tmp_path / name)
        assert len(rows) == 60 and rows[0].split == "test" and rows[59].split == "train"
    bad = tmp_path / "bad.csv"
    bad.write_text("input,answer\nhello,there\n")
    with pytest.raises(DatasetFileError, match="expected input and output"):
        read_rows(bad)


def test_make_check_names_the_entry_and_the_line(tmp_path: Path) -> None:
    records = _records(60)
    _jsonl(tmp_path / "data.jsonl", [*records[:4], {"input": "x"}, *records[4:]])
    path = _catalog(tmp_path, "data.jsonl")
    with pytest.raises(CatalogError) as exc:
        load_catalog(path)
    issue = exc.value.issues[0]
    assert (issue.entry, issue.field) == ("adapter 'own-data'", "dataset")
    assert "line 5: field 'output': missing" in issue.message
    done = subprocess.run(
        [sys.executable, "-m", "config", "check", "--catalog", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 1
    assert "adapter 'own-data': field 'dataset': data.jsonl: line 5" in done.stderr


def test_a_missing_file_and_a_task_without_its_definition_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="file not found"):
        load_catalog(_catalog(tmp_path, "nowhere.jsonl"))
    _jsonl(tmp_path / "data.jsonl", _records(60))
    for fields, field, why in [
        ({"instruction": None}, "task", "so the entry defines it; missing: instruction"),
        ({"metric": "bleu"}, "metric", "'bleu' is not one of chrf, exact"),
        ({"metric": "json_schema"}, "json_schema", "checks outputs against"),
        ({"dataset_": "sales_json"}, "task", "missing: dataset (a file of yours"),
    ]:
        dataset = fields.pop("dataset_", "data.jsonl")
        with pytest.raises(CatalogError) as exc:
            load_catalog(_catalog(tmp_path, dataset, **fields))
        issue = exc.value.issues[0]
        assert (issue.entry, issue.field) == ("adapter 'own-data'", field)
        assert why in issue.message


@pytest.mark.parametrize(("records", "rank", "alpha"), [(60, 64, 128), (240, 16, 32)])
def test_a_custom_tasks_rank_follows_its_data_size(tmp_path, records, rank, alpha) -> None:
    """The seed article's table: a high rank and alpha for a limited set (under 100)."""
    _jsonl(tmp_path / "data.jsonl", _distinct(records))
    catalog = _catalog(tmp_path, "data.jsonl", minimums={"chrf": 30.0})
    profile = load_deployment("dev", catalog).adapter("own-data").profile
    assert (profile.rank, profile.alpha) == (rank, alpha)
    assert profile.instruction == INSTRUCTION and profile.minimums == {"chrf": 30.0}


def test_the_shipped_example_is_a_valid_dataset() -> None:
    rows = read_rows(ROOT / "examples" / "support-triage.jsonl")
    assert len(rows) >= 200 and all(json.loads(r.output)["category"] for r in rows)
    assert load_deployment("local").adapter("support-triage").entry.dataset_records == len(rows)


def test_a_json_tasks_labels_must_satisfy_its_schema(tmp_path: Path) -> None:
    good = {"category": "billing", "urgency": "low", "order_id": None}
    records = [{"input": f"question number {i}", "output": good} for i in range(60)]
    records[6] = {"input": "what?", "output": "n/a"}
    records[9] = {"input": "and?", "output": {**good, "urgency": "someday"}}
    _jsonl(tmp_path / "data.jsonl", records)
    catalog = _catalog(tmp_path, "data.jsonl", metric="json_schema", json_schema="support-triage")
    with pytest.raises(CatalogError) as exc:
        load_catalog(catalog)
    messages = [i.message for i in exc.value.issues]
    assert any("line 7: field 'output': not JSON" in m for m in messages)
    assert any("line 10: field 'output': not valid for support-triage" in m for m in messages)


def test_built_in_tasks_keep_their_floors_and_their_generators(tmp_path: Path) -> None:
    _jsonl(tmp_path / "data.jsonl", _records(60))
    for fields, field in [
        ({"task": "pii_redaction", "instruction": None, "metric": None}, "dataset"),
        (
            {
                "task": "style_transfer",
                "dataset_": "style_transfer",
                "instruction": None,
                "metric": None,
                "maximums": {},
            },
            "maximums",
        ),
        ({"minimums": {"exact": 0.9}}, "minimums"),
    ]:
        dataset = fields.pop("dataset_", "data.jsonl")
        with pytest.raises(CatalogError) as exc:
            load_catalog(_catalog(tmp_path, dataset, **fields))
        assert field in {i.field for i in exc.value.issues}, exc.value


def test_a_bom_a_numeric_csv_label_and_a_path_outside_the_repository(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(
        "\ufeff".encode() + _jsonl(tmp_path / "plain.jsonl", _records(60)).read_bytes()
    )
    assert len(read_rows(path)) == 60
    csv = tmp_path / "ratings.csv"
    csv.write_text("input,output\n" + "".join(f"review {i},{i % 5}\n" for i in range(60)))
    assert read_rows(csv)[3].output == "3"
    _jsonl(tmp_path.parent / f"{tmp_path.name}-outside.jsonl", _records(60))
    with pytest.raises(CatalogError, match="outside the repository"):
        load_catalog(_catalog(tmp_path, f"../{tmp_path.name}-outside.jsonl"))


def test_a_files_own_split_with_a_near_duplicate_across_parts_is_refused(tmp_path: Path) -> None:
    """A team's split is honoured, not trusted: the same sentence with another parcel number
    in train and in test would let the gate test what the adapter trained on."""

    records = [{**r, "split": "test" if i < 25 else "train"} for i, r in enumerate(_distinct(80))]
    assert read_rows(_jsonl(tmp_path / "clean.jsonl", records))
    records[40]["input"] = records[3]["input"].replace("question", "Question") + "!"
    with pytest.raises(DatasetFileError) as caught:
        read_rows(_jsonl(tmp_path / "leak.jsonl", records))
    (problem,) = caught.value.problems
    assert problem.startswith("line 41: field 'split': 'train'")
    assert "near-duplicate group with line 4 in 'test'" in problem


def test_csv_labels_that_pandas_reads_as_missing_are_labels(tmp_path: Path) -> None:
    """ "None", "N/A" and "null" are ordinary class labels; pandas' default NA list turned them
    into missing values and the row was refused."""
    labels = ["None", "N/A", "NA", "null", "nan", "#N/A", "n/a", "<NA>"]
    path = tmp_path / "labels.csv"
    path.write_text(
        "input,output\n" + "".join(f"ticket {i},{labels[i % len(labels)]}\n" for i in range(60))
    )
    assert [r.output for r in read_rows(path)[: len(labels)]] == labels


def test_a_split_that_is_not_text_is_named_with_its_type(tmp_path: Path) -> None:
    records = [{**r, "split": 1} for r in _distinct(60)]
    with pytest.raises(DatasetFileError, match="line 1: field 'split': 1 is a int"):
        read_rows(_jsonl(tmp_path / "d.jsonl", records))
    records = [{**r, "split": True} for r in _distinct(60)]
    with pytest.raises(DatasetFileError, match="line 1: field 'split': True is a bool"):
        read_rows(_jsonl(tmp_path / "b.jsonl", records))


def test_csv_problems_name_the_line_the_row_starts_on_and_say_what_is_wrong(
    tmp_path: Path,
) -> None:
    body = "".join(f'"ticket {i}\nsecond line",answer {i}\n' for i in range(60))
    path = tmp_path / "multiline.csv"
    path.write_text("input,output\n" + body + ",empty input\n")
    with pytest.raises(DatasetFileError, match=r"row 61 \(line 122\): field 'input'"):
        read_rows(path)
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("input,output\n" + "".join(f"q {i},a {i}\n" for i in range(5)) + "a,b,c\n")
    with pytest.raises(DatasetFileError) as caught:
        read_rows(ragged)
    assert "line 7" in str(caught.value) and "error occurred while generating" not in str(
        caught.value
    )
    header_only = tmp_path / "header.csv"
    header_only.write_text("input,output\n")
    with pytest.raises(DatasetFileError, match="0 records"):
        read_rows(header_only)
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(DatasetFileError, match="no header row"):
        read_rows(empty)


def test_a_file_whose_groups_cannot_be_split_fails_make_check(tmp_path: Path) -> None:
    """60 fills of one sentence are one near-duplicate group: no test part can be drawn, and
    make check says so before a job is created (it used to pass, and the launch refused)."""
    _jsonl(tmp_path / "data.jsonl", _records(60))
    with pytest.raises(CatalogError) as exc:
        load_catalog(_catalog(tmp_path, "data.jsonl"))
    (issue,) = exc.value.issues
    assert (issue.entry, issue.field) == ("adapter 'own-data'", "dataset")
    assert "near-duplicate groups leave" in issue.message


def test_long_records_name_both_fields_and_are_counted_past_the_first_ten() -> None:
    from config.dataset_files import Row, token_problems

    rows = [Row(f"line {i}", "q" * 50, "a" * 300) for i in range(1, 16)]
    problems = token_problems(rows, lambda text, out: len(text) + len(out), 256)
    assert problems[0].startswith("line 1: fields 'input' and 'output': 350 tokens")
    assert "300 of them the output's" in problems[0]
    assert problems[10:] == ["and 5 more records too long"]


@pytest.mark.parametrize(
    ("ref", "why"),
    [
        ("#/definitions/missing", "does not resolve"),
        ("https://example.com/s.json", "nothing is fetched"),
    ],
)
def test_a_schema_reference_that_does_not_resolve_fails_make_check(
    tmp_path: Path, monkeypatch, ref: str, why: str
) -> None:
    """jsonschema resolves an unknown $ref by downloading it; make check refuses it instead
    (it used to end in a PointerToNowhere traceback, or a network fetch)."""
    import urllib.request

    def no_network(*args, **kwargs):
        raise AssertionError("make check reached for the network")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    schema = {"type": "object", "properties": {"category": {"$ref": ref}}}
    (tmp_path / "s.json").write_text(json.dumps(schema))
    records = [{**r, "output": {"category": r["output"]}} for r in _distinct(60)]
    _jsonl(tmp_path / "data.jsonl", records)
    with pytest.raises(CatalogError) as exc:
        load_catalog(_catalog(tmp_path, "data.jsonl", metric="json_schema", json_schema="s.json"))
    (issue,) = exc.value.issues
    assert issue.field == "json_schema" and why in issue.message and ref in issue.message


@pytest.mark.parametrize(
    ("bounds", "why"),
    [
        ({"minimums": {"json_valid": 0.9}}, "metric chrf does not compute it"),
        ({"minimums": {"exact_match": 90}}, "off its scale of 0 to 1"),
        ({"minimums": {"chrf": 0.5}}, "for a share write 50"),
        ({"minimums": {"faithfulness": 0.8}}, "gate on metric facts instead"),
        ({"maximums": {"pii_leak_rate": 0.0}}, "metric chrf does not compute it"),
    ],
)
def test_floors_the_gate_could_never_or_always_meet_are_refused(
    tmp_path: Path, bounds: dict, why: str
) -> None:
    """Each of these passed make check, and the gate then refused every adapter (a score the
    metric never computes) or none (a chrF floor of 0.5; faithfulness, 1.0 on records that
    list no facts)."""
    _jsonl(tmp_path / "data.jsonl", _distinct(60))
    with pytest.raises(CatalogError) as exc:
        load_catalog(_catalog(tmp_path, "data.jsonl", **bounds))
    (issue,) = exc.value.issues
    assert issue.field == next(iter(bounds)) and why in issue.message


def test_a_redaction_task_of_your_own_is_gated_on_leaks(tmp_path: Path) -> None:
    records = [
        {
            "input": f"please call {r['input']} on 555 01{i:02d}",
            "output": "please call [NAME] on [PHONE]",
        }
        for i, r in enumerate(_distinct(60))
    ]
    _jsonl(tmp_path / "data.jsonl", records)
    profile = (
        load_deployment("dev", _catalog(tmp_path, "data.jsonl", metric="redaction"))
        .adapter("own-data")
        .profile
    )
    assert profile.metric == "redaction" and profile.maximums == {"pii_leak_rate": 0.0}


def test_ambiguous_records_are_refused_and_a_trailing_space_is_not_another_instruction(
    tmp_path: Path,
) -> None:
    both = {
        "input": "a",
        "output": "b",
        "messages": [{"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}],
    }
    null_system = {
        "messages": [
            {"role": "system", "content": None},
            {"role": "user", "content": "c"},
            {"role": "assistant", "content": "d"},
        ]
    }
    for bad, why in [
        (both, "line 1: fields 'messages' and 'input'/'output'"),
        (null_system, "line 1: field 'messages': the system turn has no text"),
        ('{"input": "a", "output": "b", "output": "c"}', "line 1: field 'output': given twice"),
    ]:
        with pytest.raises(DatasetFileError, match=why.replace("(", r"\(")):
            read_rows(_jsonl(tmp_path / "d.jsonl", [bad, *_distinct(60)]), instruction=INSTRUCTION)
    spaced = {
        "messages": [
            {"role": "system", "content": INSTRUCTION + "\n"},
            {"role": "user", "content": "c"},
            {"role": "assistant", "content": "d"},
        ]
    }
    rows = read_rows(
        _jsonl(tmp_path / "s.jsonl", [spaced, *_distinct(60)]), instruction=INSTRUCTION
    )
    assert rows[0].input == "c"


def test_two_entries_may_not_define_one_task_differently(tmp_path: Path) -> None:
    _jsonl(tmp_path / "data.jsonl", _distinct(60))
    path = _catalog(tmp_path, "data.jsonl")
    data = yaml.safe_load(path.read_text())
    data["adapters"].append(
        {**data["adapters"][0], "name": "own-data-2", "metric": "exact", "instruction": "Other."}
    )
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(CatalogError) as exc:
        load_catalog(path)
    (issue,) = exc.value.issues
    assert (issue.entry, issue.field) == ("adapter 'own-data-2'", "task")
    assert "also defined by adapter 'own-data' with another instruction and metric" in issue.message


def test_a_score_floor_is_on_its_headlines_scale(tmp_path: Path) -> None:
    """For metric chrf the score is chrF, 0-100: 40 is a floor, 0.4 a share on the wrong
    scale (40 was refused as off a 0-1 scale, and 0.4 accepted)."""
    _jsonl(tmp_path / "data.jsonl", _distinct(60))
    assert load_catalog(_catalog(tmp_path, "data.jsonl", minimums={"score": 40}))
    with pytest.raises(CatalogError, match="for a share write 40"):
        load_catalog(_catalog(tmp_path, "data.jsonl", minimums={"score": 0.4}))


def test_csv_encoding_blank_looking_lines_and_an_empty_messages_column(tmp_path: Path) -> None:
    latin = tmp_path / "latin.csv"
    latin.write_bytes("input,output\ncaf\xe9 order,x\n".encode("latin-1"))
    with pytest.raises(DatasetFileError, match="not UTF-8 text"):
        read_rows(latin)
    # A line of commas is a row (of empty cells) to pandas; a blank line is not.
    commas = tmp_path / "commas.csv"
    commas.write_text('input,output\n"a\nb",x\n,\nc,y\n\n   \nd,z\n')
    with pytest.raises(DatasetFileError) as caught:
        read_rows(commas)
    assert "row 2 (line 4): field 'input'" in str(caught.value)
    mixed = tmp_path / "mixed.csv"
    mixed.write_text(
        "input,output,messages\n" + "".join(f"{r['input']},{r['output']},\n" for r in _distinct(60))
    )
    assert len(read_rows(mixed)) == 60


@pytest.mark.parametrize(
    ("schema", "bad"),
    [
        (
            {"$schema": "https://example.com/my-dialect", "properties": {"a": {"$ref": "#/nope"}}},
            True,
        ),
        (
            {
                "$id": "https://x.test/root.json",
                "$defs": {
                    "inner": {
                        "$id": "https://x.test/inner.json",
                        "$defs": {"y": {"type": "string"}},
                        "properties": {"q": {"$ref": "#/$defs/y"}},
                    }
                },
                "properties": {"a": {"$ref": "inner.json"}},
            },
            False,
        ),
    ],
)
def test_references_resolve_as_validators_resolve_them(schema: dict, bad: bool) -> None:
    """An unknown $schema falls back to draft 2020-12 (as jsonschema does) instead of
    skipping the check; a bundled schema's inner resource resolves against itself."""
    from config.json_schema import unresolved_refs

    assert bool(unresolved_refs(schema)) is bad
