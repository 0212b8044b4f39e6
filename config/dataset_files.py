"""A team's own dataset file named by a catalog entry (``dataset: examples/x.jsonl``).

Read here, in ``config``, because ``make check`` must refuse a bad file before anything trains
on it, and because a custom task's default rank follows the size of its data (the seed
article's table: a high rank and alpha under 100 examples). ``training.datasets.user`` turns
the rows into the train / validation / test split.

Accepted records, one per JSON line, CSV row or Parquet row:

- ``{"input": "...", "output": "..."}``; an ``output`` that is a JSON object or array is kept
  as its compact JSON text (what a JSON task's adapter must write);
- ``{"messages": [{"role": "system", ...}?, {"role": "user", ...}, {"role": "assistant", ...}]}``
  (OpenAI's fine-tuning shape, one exchange). A system turn must be the entry's instruction,
  since the adapter is served with that one;
- either with an optional ``split`` (train, validation or test) that the split then honours.

JSON Lines is read with the standard library (an error names its line); CSV and Parquet go
through Hugging Face ``datasets``, as the issue that asked for them specifies, and an error
names the row (CSV: also the line it starts on, which quoted line breaks can push down).
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from config.near_duplicates import near_duplicate_groups

#: Suffixes a dataset file may have.
FORMATS = (".jsonl", ".csv", ".parquet")
#: An S3 object of one of those formats.
S3_DATASET_RE = re.compile(r"^s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]/\S+(\.jsonl|\.csv|\.parquet)$")
#: Fewest records a file may hold: enough for a test part the gate's bootstrap can use (20)
#: beside a validation part and at least as many training records.
MIN_RECORDS = 50
SPLITS = ("train", "validation", "test")
#: Problems reported per file; the rest are counted.
MAX_REPORTED = 10


@dataclass(frozen=True)
class Row:
    """One record of a dataset file: where it was (``where``: "line 7" or "row 7")."""

    where: str
    input: str
    output: str
    split: str | None = None
    system: str | None = None


class DatasetFileError(ValueError):
    """A dataset file that cannot be trained on; ``problems`` name the line and field."""

    def __init__(self, source: str, problems: list[str]):
        self.source, self.problems = source, problems
        shown = problems[:MAX_REPORTED]
        more = len(problems) - len(shown)
        super().__init__(f"{source}: " + "; ".join(shown) + (f"; and {more} more" if more else ""))


def is_file_dataset(name: str | None) -> bool:
    """Whether an entry's ``dataset`` names a file (or an S3 object), not a generator."""
    return name is not None and (name.startswith("s3://") or name.endswith(FORMATS))


def resolve_path(name: str, catalog_dir: Path, root: Path) -> Path:
    """A repository file: relative to the repository root, or to the catalog's directory."""
    for base in (root, catalog_dir):
        path = (base / name).resolve()
        if path.is_file():
            if not any(path.is_relative_to(b.resolve()) for b in (root, catalog_dir)):
                raise DatasetFileError(name, [f"{path} is outside the repository"])
            return path
    raise DatasetFileError(
        name, [f"file not found (looked in {root} and in the catalog's directory {catalog_dir})"]
    )


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _text(value: Any) -> str | None:
    """An output as text: a string itself, a JSON object or array as its compact JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict | list):
        # default=str: a Parquet struct may hold dates or decimals, which JSON has no type for.
        return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    return None


def _messages(where: str, messages: Any, problems: list[str]) -> tuple[str, str, str | None]:
    if isinstance(messages, str):  # a CSV cell holds the list as JSON text
        try:
            messages = json.loads(messages)
        except ValueError:
            problems.append(f"{where}: field 'messages': not a JSON list")
            return "", "", None
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        problems.append(f"{where}: field 'messages': must be a list of {{role, content}} objects")
        return "", "", None
    roles = [m.get("role") for m in messages]
    system = None
    if roles[:1] == ["system"]:
        system = messages[0].get("content")
        if not isinstance(system, str):
            problems.append(f"{where}: field 'messages': the system turn has no text content")
            return "", "", None
        messages, roles = messages[1:], roles[1:]
    if roles != ["user", "assistant"]:
        problems.append(
            f"{where}: field 'messages': roles {roles} - one exchange is expected: an optional "
            "system turn, then one user turn and one assistant turn"
        )
        return "", "", None
    contents = [m.get("content") for m in messages]
    for role, content in zip(roles, contents, strict=True):
        if not isinstance(content, str) or not content.strip():
            problems.append(f"{where}: field 'messages': the {role} turn has no text content")
            return "", "", None
    return contents[0], contents[1], system if isinstance(system, str) else None


def parse_record(where: str, record: Any, problems: list[str]) -> Row | None:
    """One record as a ``Row``, or ``None`` with its problems appended."""
    if not isinstance(record, dict):
        problems.append(f"{where}: expected an object with input/output or messages")
        return None
    start = len(problems)
    split = record.get("split")
    if split is not None and not isinstance(split, str):  # 0/1/2 or true: not a part's name
        problems.append(
            f"{where}: field 'split': {split!r} is a {type(split).__name__}; it must be one of "
            f"{', '.join(SPLITS)}"
        )
    elif split is None or not split.strip():  # absent, empty, or a CSV's empty cell
        split = None
    elif split not in SPLITS:
        problems.append(f"{where}: field 'split': {split!r} is not one of {', '.join(SPLITS)}")
    if record.get("messages") not in (None, ""):  # a CSV's empty messages cell is none
        if any(record.get(f) not in (None, "") for f in ("input", "output")):
            problems.append(
                f"{where}: fields 'messages' and 'input'/'output': a record is one or the "
                "other, not both"
            )
            return None
        text, output, system = _messages(where, record["messages"], problems)
    else:
        system = None
        text = record.get("input")
        output = _text(record.get("output"))
        for field, value in (("input", text), ("output", output)):
            if not isinstance(value, str) or not value.strip():
                got = "missing" if record.get(field) is None else "empty or not text"
                problems.append(
                    f"{where}: field '{field}': {got} (a record is {{input, output}} or "
                    "{messages})"
                )
    if len(problems) > start:
        return None
    return Row(where, str(text), str(output), split, system)


class DuplicateKeyError(ValueError):
    """A JSON object that names one key twice: the parser would keep the last silently."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise DuplicateKeyError(key)
        seen[key] = value
    return seen


def _read_jsonl(path: Path, problems: list[str]) -> list[Row]:
    rows: list[Row] = []
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            where = f"line {number}"
            if not raw.strip():
                continue
            try:
                record = json.loads(
                    raw.decode("utf-8-sig" if number == 1 else "utf-8"),
                    object_pairs_hook=_unique_keys,
                )
            except UnicodeDecodeError:
                problems.append(f"{where}: not UTF-8 text")
                continue
            except json.JSONDecodeError as exc:
                problems.append(f"{where}: not JSON ({exc.msg} at column {exc.colno})")
                continue
            except DuplicateKeyError as exc:
                problems.append(f"{where}: field {exc.args[0]!r}: given twice in one object")
                continue
            if (row := parse_record(where, record, problems)) is not None:
                rows.append(row)
    return rows


def _csv_lines(path: Path) -> tuple[list[str], list[int]]:
    """The CSV's header and the physical line each data row starts on: a quoted field may
    hold line breaks, so a row's line is not its index plus one."""
    with path.open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        header = next(reader, [])
        starts, line = [], reader.line_num
        for cells in reader:
            # pandas skips a blank line (and one of spaces), not one of commas
            if cells and (len(cells) > 1 or cells[0].strip()):
                starts.append(line + 1)
            line = reader.line_num
    return header, starts


def _cause(exc: BaseException) -> str:
    """The innermost message: ``datasets`` wraps pandas' and pyarrow's errors (which name the
    line) in a generic "An error occurred while generating the dataset"."""
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return str(exc).strip() or type(exc).__name__


def _read_table(path: Path, problems: list[str]) -> list[Row]:
    """CSV or Parquet through Hugging Face ``datasets``, held in memory (no cache files)."""
    try:
        import datasets
        from datasets import Dataset, Features, Value
    except ImportError:
        problems.append("reading CSV or Parquet needs Hugging Face datasets (pip install datasets)")
        return []
    starts: list[int] = []
    if path.suffix == ".csv":
        try:
            header, starts = _csv_lines(path)
        except UnicodeDecodeError:
            problems.append("not UTF-8 text (save the file as UTF-8)")
            return []
        except csv.Error as exc:
            problems.append(f"cannot be read as CSV: {exc}")
            return []
        if not header:
            problems.append("no header row (expected input,output[,split] or messages)")
            return []
        if not starts:
            problems.append("0 records: the file has a header row and no data")
            return []
    bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # make check prints problems, not progress
    try:
        if path.suffix == ".csv":
            # Every column as text: a label of "1" or "4.5" is a label, not a number; and
            # "None", "N/A" or "null" are labels, not pandas' missing values.
            text = Features({column: Value("string") for column in header})
            table = Dataset.from_csv(
                str(path),
                keep_in_memory=True,
                features=text,
                keep_default_na=False,
                na_filter=False,
            )
        else:
            table = Dataset.from_parquet(str(path), keep_in_memory=True)
    except Exception as exc:
        problems.append(f"cannot be read as {path.suffix[1:].upper()}: {_cause(exc)}")
        return []
    finally:
        if bars:
            datasets.enable_progress_bars()
    columns = set(table.column_names)
    if "messages" not in columns and not {"input", "output"} <= columns:
        problems.append(
            f"columns {sorted(columns)}: expected input and output (and optional split), or "
            "messages"
        )
        return []
    rows: list[Row] = []
    for i, record in enumerate(table):
        line = f" (line {starts[i]})" if i < len(starts) else ""
        if (row := parse_record(f"row {i + 1}{line}", record, problems)) is not None:
            rows.append(row)
    return rows


#: Test and validation shares of the records when the file gives no split, with floors.
TEST_SHARE, TEST_MIN = 0.15, 20
VALIDATION_SHARE, VALIDATION_MIN = 0.10, 10
#: Fewest near-duplicate groups the test part may hold: the gate resamples groups, and a few
#: groups make an interval that says nothing.
TEST_GROUPS_MIN = 10


class DatasetSplitError(ValueError):
    """The near-duplicate groups of a file leave no usable train / validation / test split."""


def partition(rows: list[Row], task: str, seed: int = 0) -> tuple[list[int], dict[str, list[int]]]:
    """Each row's near-duplicate group, and the rows (by index) of each part: the file's own
    split, honoured, or whole groups drawn in a seeded order. Here, in ``config``, so that
    ``make check`` refuses a file whose groups cannot be split before a job is created;
    ``training.datasets.user`` builds the records from it."""
    groups = near_duplicate_groups([(r.input, r.output) for r in rows])
    rng = random.Random(f"{task}:{seed}")  # noqa: S311 - a reproducible split, not a secret

    def grouped(indices: list[int]) -> list[list[int]]:
        by: dict[int, list[int]] = {}
        for i in indices:
            by.setdefault(groups[i], []).append(i)
        order = list(by.values())
        rng.shuffle(order)
        return order

    def take(order: list[list[int]], want: int) -> tuple[list[int], list[list[int]]]:
        taken: list[int] = []
        for k, group in enumerate(order):
            if len(taken) >= want:
                return taken, order[k:]
            taken += group
        return taken, []

    if any(r.split is not None for r in rows):
        parts = {p: [i for i, r in enumerate(rows) if r.split == p] for p in SPLITS}
        if not parts["validation"]:
            want = max(VALIDATION_MIN, round(VALIDATION_SHARE * len(parts["train"])))
            parts["validation"], rest = take(grouped(parts["train"]), want)
            parts["train"] = [i for g in rest for i in g]
    else:
        order = grouped(list(range(len(rows))))
        test, order = take(order, max(TEST_MIN, round(TEST_SHARE * len(rows))))
        validation, order = take(order, max(VALIDATION_MIN, round(VALIDATION_SHARE * len(rows))))
        parts = {"train": [i for g in order for i in g], "validation": validation, "test": test}
    test_groups = len({groups[i] for i in parts["test"]})
    if (
        len(parts["train"]) < len(rows) // 4
        or len(parts["test"]) < TEST_MIN
        or test_groups < TEST_GROUPS_MIN
    ):
        sizes = ", ".join(f"{p} {len(parts[p])}" for p in SPLITS)
        raise DatasetSplitError(
            f"the near-duplicate groups leave {sizes} records ({test_groups} groups in test, "
            f"at least {TEST_GROUPS_MIN} needed); the file needs more distinct inputs "
            "(records that repeat one sentence or one text are one group)"
        )
    return groups, parts


#: The most cross-part near-duplicates a file's own split is reported with (the rest counted).
MAX_LEAKS_SHOWN = 5


def split_leaks(rows: list[Row]) -> list[str]:
    """A file's own split, checked: a record that is a near-duplicate (``near_duplicates``) of
    a record in another part would let the adapter be tested on what it trained on. Each
    record outside its group's main part is named, beside the group's first record there."""
    groups = near_duplicate_groups([(r.input, r.output) for r in rows])
    members: dict[int, list[Row]] = {}
    for group, row in zip(groups, rows, strict=True):
        members.setdefault(group, []).append(row)
    leaks = []
    for group_rows in members.values():
        parts = Counter(r.split for r in group_rows)
        if len(parts) < 2:
            continue
        main = parts.most_common(1)[0][0]
        anchor = next(r for r in group_rows if r.split == main)
        leaks += [
            f"{row.where}: field 'split': {row.split!r}, but the record is in one "
            f"near-duplicate group with {anchor.where} in {main!r} (the same text once "
            "digits, names and punctuation are masked, or six words in a row shared, "
            "directly or through other records of the group); put the group in one part"
            for row in group_rows
            if row.split != main
        ]
    shown = leaks[:MAX_LEAKS_SHOWN]
    if len(leaks) > len(shown):
        shown.append(f"and {len(leaks) - len(shown)} more records near-duplicated across splits")
    return shown


def read_rows(path: Path, *, instruction: str | None = None) -> list[Row]:
    """Every record of a local dataset file, or ``DatasetFileError`` naming each bad one."""
    problems: list[str] = []
    if path.suffix not in FORMATS:
        raise DatasetFileError(str(path), [f"unknown format (use one of {', '.join(FORMATS)})"])
    rows = _read_jsonl(path, problems) if path.suffix == ".jsonl" else _read_table(path, problems)
    problems += [
        f"{r.where}: field 'messages': its system turn differs from the entry's instruction "
        "(the adapter is served with the instruction; set it there, or drop the turn)"
        for r in rows
        if r.system is not None
        and instruction is not None
        and r.system.strip() != instruction.strip()
    ]
    labelled = [r for r in rows if r.split is not None]
    if labelled and len(labelled) != len(rows):
        first = next(r for r in rows if r.split is None)
        problems.append(
            f"{first.where}: field 'split': missing, while {len(labelled)} other records have "
            "one (give every record a split, or none)"
        )
    if labelled:
        for part, least in (("train", MIN_RECORDS // 2), ("test", 20)):
            have = sum(1 for r in labelled if r.split == part)
            if have < least:
                problems.append(f"split {part!r} has {have} records, fewer than {least}")
        if len(labelled) == len(rows):
            problems += split_leaks(rows)
    if not problems and len(rows) < MIN_RECORDS:
        problems.append(f"{len(rows)} records, fewer than the minimum of {MIN_RECORDS}")
    if problems:
        raise DatasetFileError(str(path), problems)
    return rows


def token_problems(rows: list[Row], count: Callable[[str, str], int], limit: int) -> list[str]:
    """Records whose prompt and answer together (``count``: tokens in the base's chat template)
    pass ``limit``: the trainer would cut their answer off. The first ``MAX_REPORTED`` are
    named, with how much of the count is the answer's; the rest are counted."""
    problems = []
    for r in rows:
        tokens = count(r.input, r.output)
        if tokens > limit:
            answer = tokens - count(r.input, "")
            problems.append(
                f"{r.where}: fields 'input' and 'output': {tokens} tokens together in the chat "
                f"template ({answer} of them the output's), over the limit of {limit} "
                "(max_length); shorten them"
            )
    if len(problems) > MAX_REPORTED:
        problems[MAX_REPORTED:] = [f"and {len(problems) - MAX_REPORTED} more records too long"]
    return problems
