"""Reads and validates the catalog and environment files; the one door to them.

Every error names the file, the entry and the field, because the person reading it is
someone who just edited one YAML entry and needs to know which line to fix. Errors are
collected, not raised one at a time, so a catalog with three mistakes shows all three.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from config.dataset_files import (
    MAX_REPORTED,
    DatasetFileError,
    DatasetSplitError,
    Row,
    partition,
    read_rows,
    resolve_path,
)
from config.json_schema import unresolved_refs, validator
from config.schema import (
    SAGEMAKER_NAME_MAX,
    SAGEMAKER_NAME_RE,
    AdapterEntry,
    BaseModelEntry,
    Catalog,
    Environment,
    PipelineConfig,
    cap_problem,
)
from config.tasks import TASK_PROFILES, TaskProfile, headline
from contracts.quality import DEFAULT_MARGINS, signals_for
from contracts.routing import CanaryRoute, QuotaLimits, Route, RoutingTable
from contracts.tokens import MESSAGE_OVERHEAD, text_tokens_bound

CONFIG_DIR = Path(__file__).resolve().parent
CATALOG_PATH = CONFIG_DIR / "adapters.yaml"
ENVIRONMENTS_DIR = CONFIG_DIR / "environments"
PIPELINE_PATH = CONFIG_DIR / "pipeline.yaml"


@dataclass(frozen=True)
class Issue:
    file: str
    entry: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.entry}: field '{self.field}': {self.message}"


class CatalogError(ValueError):
    """One or more catalog or environment entries are invalid."""

    def __init__(self, issues: list[Issue]):
        self.issues = issues
        super().__init__("\n".join(str(i) for i in issues))


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys instead of keeping the last one."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CatalogError([Issue(str(path), "(file)", "-", "file not found")]) from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise CatalogError([Issue(str(path), "(file)", "-", f"not valid YAML: {exc}")]) from None


def _read_mapping(path: Path, file: str, entry: str) -> dict[str, Any]:
    """A YAML file whose top level must be a mapping (catalog, environment, pipeline)."""
    raw = _read_yaml(path)
    if not isinstance(raw, dict):
        raise CatalogError([Issue(file, entry, "-", "expected a mapping")])
    return raw


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(CONFIG_DIR.parent))
    except ValueError:
        return str(path)


def _entry_label(raw: Any, loc: tuple[Any, ...]) -> tuple[str, str]:
    """Turn a pydantic error location into ('adapter NAME', 'field.path')."""
    if len(loc) >= 2 and loc[0] == "adapters" and isinstance(loc[1], int):
        name = None
        items = raw.get("adapters") if isinstance(raw, dict) else None
        if isinstance(items, list) and loc[1] < len(items) and isinstance(items[loc[1]], dict):
            name = items[loc[1]].get("name")
        label = f"adapter {name!r}" if name else f"adapters[{loc[1]}]"
        return label, ".".join(str(p) for p in loc[2:]) or "-"
    if len(loc) >= 2 and loc[0] == "base_models":
        return f"base model {loc[1]!r}", ".".join(str(p) for p in loc[2:]) or "-"
    return "(top level)", ".".join(str(p) for p in loc) or "-"


def _pydantic_issues(file: str, raw: Any, exc: ValidationError) -> list[Issue]:
    issues = []
    for err in exc.errors():
        entry, field = _entry_label(raw, tuple(err["loc"]))
        msg = _message(err["msg"])
        issues.append(Issue(file, entry, field, msg))
    return issues


def _field_issues(file: str, entry: str, exc: ValidationError) -> list[Issue]:
    """One issue per invalid field of a single-entry file (an environment, the pipeline)."""
    return [
        Issue(file, entry, ".".join(map(str, e["loc"])) or "-", _message(e["msg"]))
        for e in exc.errors()
    ]


def _message(msg: str) -> str:
    return msg.removeprefix("Value error, ")


def load_catalog(path: Path | str = CATALOG_PATH) -> Catalog:
    """Load and fully validate the catalog (everything that does not depend on an environment)."""
    path = Path(path)
    file = _display(path)
    raw = _read_mapping(path, file, "(top level)")
    try:
        catalog = Catalog.model_validate(raw)
    except ValidationError as exc:
        raise CatalogError(_pydantic_issues(file, raw, exc)) from None
    issues: list[Issue] = []
    seen: dict[str, int] = {}
    for i, a in enumerate(catalog.adapters):
        label = f"adapter {a.name!r}"
        key = a.name.lower()  # IC names are case-insensitive in practice; treat as one
        if key in seen:
            issues.append(
                Issue(file, label, "name", f"duplicate adapter name (also adapters[{seen[key]}])")
            )
        seen.setdefault(key, i)
        base = catalog.base_models.get(a.base)
        if base is None:
            known = ", ".join(sorted(catalog.base_models))
            issues.append(Issue(file, label, "base", f"unknown base {a.base!r} (known: {known})"))
            continue
        issues.extend(Issue(file, label, f, why) for f, why in a.task_problems())
        issues.extend(_dataset_issues(path.parent, file, label, a))
        issues.extend(_rank_issues(file, label, a, a.base, base))
        issues.extend(_schema_issues(path.parent, file, label, a))
        issues.extend(_label_issues(path.parent, file, label, a))
        # AWS's LoRA guidance lists "changing the base revision without reevaluating its
        # adapters" among the traps: an adapter's gate holds for the base it was run on.
        for field, gated, flag in (
            ("gated_base_revision", a.gated_base_revision, ""),
            (
                "canary.gated_base_revision",
                a.canary.gated_base_revision if a.canary else None,
                " --canary",
            ),
        ):
            if gated is not None and gated != base.revision:
                issues.append(
                    Issue(
                        file,
                        label,
                        field,
                        f"published after its gate on {a.base} revision {gated}, "
                        f"but the catalog now names revision {base.revision}: "
                        "retrain or re-evaluate it (python -m training.publish "
                        f"--adapter {a.name}{flag} ...), which records the new "
                        "revision",
                    )
                )
    issues += _task_conflicts(file, catalog)
    if issues:
        raise CatalogError(issues)
    return catalog


def _task_conflicts(file: str, catalog: Catalog) -> list[Issue]:
    """Entries that define one task of their own differently: the task's instruction, metric
    and schema are what its adapters are served and gated with, so they must agree."""
    first: dict[str, AdapterEntry] = {}
    issues = []
    for a in catalog.adapters:
        if a.task in TASK_PROFILES:
            continue
        other = first.setdefault(a.task, a)
        differ = [
            f
            for f in ("instruction", "metric", "json_schema")
            if getattr(a, f) != getattr(other, f)
        ]
        if other is not a and differ:
            issues.append(
                Issue(
                    file,
                    f"adapter {a.name!r}",
                    "task",
                    f"task {a.task!r} is also defined by adapter {other.name!r} with another "
                    f"{' and '.join(differ)}; give one of them a task name of its own",
                )
            )
    return issues


#: The repository root: a dataset file's path is relative to it (or to the catalog).
REPO_ROOT = CONFIG_DIR.parent
_ROWS: dict[tuple[Path, int, int, str | None], list[Row]] = {}


def dataset_rows(a: AdapterEntry, catalog_dir: Path) -> tuple[Path, list[Row]]:
    """The entry's local dataset file and its records (read once per file version and
    instruction); ``DatasetFileError`` names the bad records."""
    if a.dataset_file is None or a.dataset_file.startswith("s3://"):
        raise ValueError(f"adapter {a.name!r} names no dataset file in the repository")
    path = resolve_path(a.dataset_file, catalog_dir, REPO_ROOT)
    stat = path.stat()
    instruction = a.profile().instruction
    key = (path, stat.st_mtime_ns, stat.st_size, instruction)
    if key not in _ROWS:
        _ROWS[key] = read_rows(path, instruction=instruction)
    return path, _ROWS[key]


def _dataset_issues(root: Path, file: str, label: str, a: AdapterEntry) -> list[Issue]:
    """Read a local dataset file and check every record, so a bad file fails ``make check``
    naming the entry, the line and the field, and never reaches a training job. An S3 object
    is read by ``training.launch`` before it creates the job."""
    if a.dataset_file is None or a.dataset_file.startswith("s3://"):
        return []
    try:
        _, rows = dataset_rows(a, root)
    except DatasetFileError as exc:
        shown = exc.problems[:MAX_REPORTED]
        more = len(exc.problems) - len(shown)
        return [Issue(file, label, "dataset", f"{a.dataset_file}: {p}") for p in shown] + (
            [Issue(file, label, "dataset", f"{a.dataset_file}: and {more} more problems")]
            if more
            else []
        )
    try:
        partition(rows, a.task, a.dataset_seed)
    except DatasetSplitError as exc:
        return [Issue(file, label, "dataset", f"{a.dataset_file}: {exc}")]
    a._dataset_records = len(rows)
    return []


#: The built-in schemas an entry may name without ``.json`` (``json_schema: sales-record``).
SCHEMAS_DIR = Path(__file__).resolve().parent / "schemas"
#: Largest JSON schema an entry may name (the runtime's OPTION_MAX_SCHEMA_BYTES default).
MAX_SCHEMA_BYTES = 64 * 1024


def _schema_issues(root: Path, file: str, label: str, a: AdapterEntry) -> list[Issue]:
    """Read the entry's JSON Schema file and check it as a JSON Schema (``jsonschema``'s
    metaschema check), so a broken schema fails ``make check`` and not every request."""
    if a.json_schema is None:
        return []

    def issue(why: str) -> list[Issue]:
        return [Issue(file, label, "json_schema", f"{a.json_schema}: {why}")]

    if a.json_schema.endswith(".json"):
        path, where = root / a.json_schema, "file not found (paths are relative to the catalog)"
    else:
        path = SCHEMAS_DIR / f"{a.json_schema}.json"
        known = ", ".join(sorted(p.stem for p in SCHEMAS_DIR.glob("*.json")))
        where = f"no built-in schema of that name (built in: {known}; or name a .json file)"
    try:
        raw = path.read_bytes()
    except OSError:
        return issue(where)
    if len(raw) > MAX_SCHEMA_BYTES:
        return issue(f"{len(raw)} bytes, over the limit of {MAX_SCHEMA_BYTES}")
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return issue(f"not valid JSON ({exc})")
    if not isinstance(doc, dict):
        return issue("must be a JSON object (a JSON Schema)")
    from jsonschema import exceptions, validators

    try:
        validators.validator_for(doc).check_schema(doc)
    except exceptions.SchemaError as exc:
        return issue(f"not a valid JSON Schema: {exc.message}")
    if bad := unresolved_refs(doc):
        return issue(
            f"$ref {', '.join(bad)} does not resolve inside the schema (references are "
            "followed within the document only; nothing is fetched): define it under $defs"
        )
    a._json_schema_document = doc
    return []


def _label_issues(root: Path, file: str, label: str, a: AdapterEntry) -> list[Issue]:
    """A JSON task's labels must be what its outputs are scored as: JSON objects that satisfy
    the entry's schema (a label that is not would make the gate fail after training)."""
    if a.dataset_file is None or a._dataset_records is None:
        return []
    if headline(a.profile().metric) != "json_field_f1":
        return []
    doc = a.json_schema_document
    check = validator(doc) if doc is not None else None
    _, rows = dataset_rows(a, root)
    problems = []
    for r in rows:
        try:
            value = json.loads(r.output)
        except ValueError:
            problems.append(f"{r.where}: field 'output': not JSON, which a JSON task's label is")
            continue
        if not isinstance(value, dict):
            problems.append(f"{r.where}: field 'output': a JSON object is expected")
        elif check is not None and (error := next(check.iter_errors(value), None)) is not None:
            why = f"not valid for {a.json_schema}: {error.message}"
            problems.append(f"{r.where}: field 'output': {why}")
    shown = problems[:MAX_REPORTED]
    more = [f"and {len(problems) - len(shown)} more"] if len(problems) > len(shown) else []
    return [Issue(file, label, "dataset", f"{a.dataset_file}: {p}") for p in shown + more]


def _rank_issues(
    file: str, label: str, a: AdapterEntry, base_key: str, base: BaseModelEntry
) -> list[Issue]:
    rank = a.profile().rank
    if rank > base.max_lora_rank:
        field = "rank" if a.rank is not None else "task"
        why = "" if a.rank is not None else f" (inherited from task {a.task!r})"
        return [
            Issue(
                file,
                label,
                field,
                f"rank {rank}{why} exceeds base {base_key!r} max_lora_rank {base.max_lora_rank}",
            )
        ]
    return []


def environment_names(directory: Path = ENVIRONMENTS_DIR, *, deployable: bool = False) -> list[str]:
    """Environment files by name; ``deployable=True`` keeps only those with AWS stacks."""
    names = sorted(p.stem for p in directory.glob("*.yaml"))
    if deployable:
        names = [n for n in names if load_environment(n, directory).deployable]
    return names


#: A canary's component is its stable component's name with this suffix; a merged entry's
#: base component, with the other.
CANARY_SUFFIX, MERGED_SUFFIX = "-canary", "-merged"


@dataclass(frozen=True)
class ResolvedAdapter:
    """An adapter as one environment deploys it."""

    entry: AdapterEntry
    component_name: str
    #: The task profile with the entry's overrides, then the environment's training plan.
    profile: TaskProfile

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def merged(self) -> bool:
        return self.entry.serving == "merged"

    @property
    def serving_component(self) -> str:
        """The component that answers the entry's stable version: its adapter component, or
        for ``serving: merged`` the base component of its own that serves the merged model."""
        return f"{self.component_name}{MERGED_SUFFIX}" if self.merged else self.component_name

    @property
    def canary_component_name(self) -> str | None:
        """The canary version's own adapter component, while the entry has a canary."""
        return f"{self.component_name}{CANARY_SUFFIX}" if self.entry.canary else None

    @property
    def component_names(self) -> tuple[str, ...]:
        """Every component this entry deploys (the stable one, and a canary's)."""
        canary = self.canary_component_name
        return (self.serving_component, canary) if canary else (self.serving_component,)


@dataclass(frozen=True)
class Deployment:
    """The catalog seen through one environment: what that environment serves and routes."""

    env: Environment
    catalog: Catalog
    base_key: str
    base: BaseModelEntry
    adapters: tuple[ResolvedAdapter, ...]

    @property
    def endpoint_name(self) -> str:
        return f"{self.env.prefix}-endpoint"

    @property
    def base_component_name(self) -> str:
        return f"{self.env.prefix}-base"

    def adapter(self, name: str) -> ResolvedAdapter:
        for a in self.adapters:
            if a.name == name:
                return a
        raise KeyError(name)

    def routing_table(self) -> RoutingTable:
        """What the router ships with: adapter name -> component and who may call it."""
        return RoutingTable(
            endpoint=self.endpoint_name,
            base_component=self.base_component_name,
            base_revision=self.base.revision,
            operators=tuple(self.env.router.operators),
            adapters={a.name: _route(a, self.env.account) for a in self.adapters},
        )


def _possible_callers(allow: Any, own_account: str | None) -> int:
    """How many distinct voices an entry admits (``lambda_proxy.auth.voice``): one per tenant
    and principal of the environment's own account it names, one for its own account's
    wildcard, and one per other account, however many of its roles or wildcards it names. A
    canary's ``min_callers`` is capped at it, so an adapter with one tenant can still be rolled
    back."""
    voices: set[str] = set()
    for tenant in allow.tenants:
        account, sep, _ = str(tenant).partition(":")
        foreign = sep and account != own_account
        voices.add(f"{account}:*" if foreign else (tenant if sep else f"own:{tenant}"))
    for arn in allow.principals:
        parts = str(arn).split(":")
        account = parts[4] if len(parts) > 4 else ""
        voices.add(f"{account}:*" if account and account != own_account else str(arn))
    return max(1, len(voices))


def _route(a: ResolvedAdapter, account: str | None) -> Route:
    entry, c = a.entry, a.entry.canary
    canary = None
    if c is not None:
        canary = CanaryRoute(
            component=a.canary_component_name,
            version=c.version,
            weight=c.weight,
            max_error_rate=c.max_error_rate,
            window_s=c.window_s,
            min_requests=c.min_requests,
            min_callers=min(c.min_callers, _possible_callers(entry.allow, account)),
            sha256=c.sha256,
            weights_sha256=c.weights_sha256,
            shadow=c.shadow,
            # The signals the task's gate metric makes meaningful, each with its margin.
            margins={
                s: c.margins.get(s, DEFAULT_MARGINS[s]) for s in signals_for(a.profile.metric)
            },
            min_pairs=c.min_pairs,
            promote_after=c.promote_after,
            promote=c.promote,
            confidence=c.confidence,
            # training.registry.group_name: the stable component's name.
            # Every canary's decisions are recorded in its version's package, and read back
            # from it when the cache lost its switch (lambda_proxy.service.read_back).
            registry_group=a.component_name,
        )
    return Route(
        component=a.serving_component,
        version=entry.version,
        task=entry.task,
        description=entry.description,
        tenants=tuple(entry.allow.tenants),
        principals=tuple(entry.allow.principals),
        cache=entry.cache,
        # The pinned digests: part of the router's cache key, and the weights' one is compared
        # with the artifact each answer reports.
        sha256=entry.sha256,
        weights_sha256=entry.weights_sha256,
        # An entry's quota that sets no limit routes as none.
        quota=entry.quota if entry.quota != QuotaLimits() else None,
        json_schema=entry.json_schema_document,
        canary=canary,
        prompt_overhead=_prompt_overhead(a.profile.instruction),
    )


def _prompt_overhead(instruction: str) -> int:
    """What the container adds to a prompt without a system turn, as the router's quota counts
    it (``contracts.tokens``): the task's instruction as a system turn and the assistant turn's
    opening."""
    system = text_tokens_bound(instruction) + MESSAGE_OVERHEAD if instruction else 0
    return system + MESSAGE_OVERHEAD


def load_environment(name: str, directory: Path = ENVIRONMENTS_DIR) -> Environment:
    path = directory / f"{name}.yaml"
    file = _display(path)
    if not path.exists():
        known = ", ".join(environment_names(directory))
        raise CatalogError(
            [Issue(file, f"environment {name!r}", "env", f"unknown environment (known: {known})")]
        )
    raw = {"name": name, **_read_mapping(path, file, f"environment {name!r}")}
    try:
        env = Environment.model_validate(raw)
    except ValidationError as exc:
        raise CatalogError(_field_issues(file, f"environment {name!r}", exc)) from None
    if env.name != name:
        raise CatalogError(
            [Issue(file, f"environment {name!r}", "name", "must match the file name")]
        )
    return env


def load_deployment(
    env_name: str,
    catalog_path: Path | str = CATALOG_PATH,
    environments_dir: Path = ENVIRONMENTS_DIR,
) -> Deployment:
    """Catalog + environment, with every cross-file rule checked."""
    catalog = load_catalog(catalog_path)
    env = load_environment(env_name, environments_dir)
    return resolve(catalog, env, _display(Path(catalog_path)), _display(environments_dir))


def resolve(catalog: Catalog, env: Environment, catalog_file: str, env_dir: str) -> Deployment:
    env_file = f"{env_dir}/{env.name}.yaml"
    env_label = f"environment {env.name!r}"
    issues: list[Issue] = []
    for src, dst in env.base_overrides.items():
        for key, fld in ((src, "base_overrides"), (dst, "base_overrides")):
            if key not in catalog.base_models:
                issues.append(Issue(env_file, env_label, fld, f"unknown base {key!r}"))
    if env.base not in catalog.base_models:
        known = ", ".join(sorted(catalog.base_models))
        issues.append(Issue(env_file, env_label, "base", f"unknown base {env.base!r} ({known})"))
    if issues:
        raise CatalogError(issues)
    base = catalog.base_models[env.base]

    by_name = {a.name: a for a in catalog.adapters}
    if env.adapters == "all":
        selected = [
            a for a in catalog.adapters if env.base_overrides.get(a.base, a.base) == env.base
        ]
    else:
        selected = []
        for n in env.adapters:
            if n not in by_name:
                issues.append(Issue(env_file, env_label, "adapters", f"unknown adapter {n!r}"))
            else:
                selected.append(by_name[n])

    for name in sorted(set(env.training.adapters) - set(by_name)):
        issues.append(Issue(env_file, env_label, "training.adapters", f"unknown adapter {name!r}"))
    # Tasks are the built-in profiles and those the catalog's entries define (a custom task is
    # known only once the catalog is read, so the environment's schema cannot check it alone).
    tasks = set(TASK_PROFILES) | {a.task for a in catalog.adapters}
    for name in sorted(set(env.training.tasks) - tasks):
        issues.append(
            Issue(
                env_file,
                env_label,
                "training.tasks",
                f"unknown task {name!r} (known: {', '.join(sorted(tasks))})",
            )
        )
    resolved: list[ResolvedAdapter] = []
    for a in selected:
        label = f"adapter {a.name!r}"
        served = env.base_overrides.get(a.base, a.base)
        if served != env.base:
            issues.append(
                Issue(
                    catalog_file,
                    label,
                    "base",
                    f"base {a.base!r} is not served by environment {env.name!r} ({env.base!r})",
                )
            )
            continue
        issues.extend(_rank_issues(catalog_file, label, a, env.base, base))
        if (problem := cap_problem(a.quota, env.router.max_new_tokens_cap)) is not None:
            issues.append(
                Issue(catalog_file, label, "quota", f"in environment {env.name!r}: {problem}")
            )
        component = f"{env.prefix}-{a.name}"
        names = (
            [component]
            + ([component + CANARY_SUFFIX] if a.canary else [])
            + ([component + MERGED_SUFFIX] if a.serving == "merged" else [])
        )
        bad = [n for n in names if len(n) > SAGEMAKER_NAME_MAX or not SAGEMAKER_NAME_RE.match(n)]
        for n in bad:
            issues.append(
                Issue(
                    catalog_file,
                    label,
                    "canary" if n != component else "name",
                    f"inference-component name {n!r} ({len(n)} characters) breaks "
                    f"SageMaker's {SAGEMAKER_NAME_MAX}-character / "
                    "^[a-zA-Z0-9](-*[a-zA-Z0-9])*$ rule in environment "
                    f"{env.name!r}",
                )
            )
        if bad:
            continue
        profile = env.training.apply(a.profile(), a.name)
        resolved.append(ResolvedAdapter(entry=a, component_name=component, profile=profile))
    owners: dict[str, str] = {}
    for r in resolved:
        for n in r.component_names:
            if n.lower() in owners:
                issues.append(
                    Issue(
                        catalog_file,
                        f"adapter {r.name!r}",
                        "name",
                        f"inference component {n!r} is also adapter "
                        f"{owners[n.lower()]!r}'s (a canary's component is "
                        f"NAME{CANARY_SUFFIX}, a merged entry's NAME{MERGED_SUFFIX})",
                    )
                )
            owners.setdefault(n.lower(), r.name)
    merged = [r.name for r in resolved if r.merged]
    needed = env.serving.instances_for_a_rollout(1 + len(merged))
    if merged and needed > env.serving.max_instance_count:
        issues.append(
            Issue(
                env_file,
                env_label,
                "serving.max_instance_count",
                f"{env.serving.max_instance_count} instances cannot hold the base "
                f"and {len(merged)} merged component(s) ({', '.join(merged)}) at "
                f"max_base_copies {env.serving.max_base_copies} with room for a "
                f"rolling batch: raise it to {needed}",
            )
        )
    if issues:
        raise CatalogError(issues)
    return Deployment(
        env=env, catalog=catalog, base_key=env.base, base=base, adapters=tuple(resolved)
    )


def load_pipeline(path: Path | str = PIPELINE_PATH) -> PipelineConfig:
    """The pipeline file, with every stage checked to be a deployable environment."""
    path = Path(path)
    file = _display(path)
    raw = _read_mapping(path, file, "pipeline")
    try:
        cfg = PipelineConfig.model_validate(raw)
    except ValidationError as exc:
        raise CatalogError(_field_issues(file, "pipeline", exc)) from None
    deployable = environment_names(deployable=True)
    bad = [s for s in cfg.stages if s not in deployable]
    if bad:
        why = f"not deployable environments: {bad} (deployable: {deployable})"
        raise CatalogError([Issue(file, "pipeline", "stages", why)])
    return cfg
