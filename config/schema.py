"""Typed shape of the adapter catalog and the environment files (pydantic v2).

Field-level rules live here; rules that need more than one entry (duplicates, unknown base,
rank against the base, names after the environment prefix) live in ``config.loader``, which
is the only place that reads the YAML files.
"""

from __future__ import annotations

import math
import re
from enum import StrEnum
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from config import layout
from config.dataset_files import FORMATS, S3_DATASET_RE, is_file_dataset
from config.devices import DEVICES
from config.tasks import (
    COMMON_COLUMNS,
    CUSTOM_METRICS,
    FILE_TASKS,
    METRIC_COLUMNS,
    PERCENT_COLUMNS,
    SCORE_COLUMNS,
    TARGET_MODULES,
    TASK_PROFILES,
    Targets,
    TaskProfile,
    custom_profile,
    headline,
)
from contracts.quality import SIGNALS
from contracts.routing import QuotaLimits
from contracts.settings import RouterSettings, RuntimeSettings

#: SageMaker's rule for endpoint, endpoint-config, model and inference-component names.
SAGEMAKER_NAME_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9])*$")
SAGEMAKER_NAME_MAX = 63
#: An adapter artifact is a gzip'd tar in S3 (what Specification.Container.ArtifactUrl takes).
ARTIFACT_RE = re.compile(r"^s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]/\S+\.tar\.gz$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
GIT_SHA_RE = re.compile(r"^[0-9a-f]{40}$")
#: Suffixes the platform gives its own components; an adapter may not take them.
RESERVED_ADAPTER_NAMES = frozenset({"base", "endpoint", "config", "model"})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


#: An ECR image address's registry part, then the repository name.
ECR_REGISTRY_RE = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z]{2}(-[a-z]+)+-\d)\.amazonaws\.com(\.cn)?/"
    r"(?P<name>.+)$"
)
#: ECR's own repositoryName rule (botocore's ecr service model, shape RepositoryName: 2 to 256
#: characters of this pattern).
ECR_REPOSITORY_RE = re.compile(
    r"^(?=.{2,256}$)[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$"
)


class ImageRef(_Strict):
    """A container image in ECR: repository plus exactly one of tag or digest.

    ``repository`` is either a bare repository name, which each environment creates in its own
    registry as ``PREFIX/NAME`` (so dev and staging may share an account), or a full ECR
    address ``ACCOUNT.dkr.ecr.REGION.amazonaws.com/NAME`` of a repository the platform does not
    own (a central registry), used as it is.
    """

    repository: str = Field(min_length=2, max_length=320)
    tag: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")
    digest: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")

    @model_validator(mode="after")
    def _one_reference(self) -> ImageRef:
        if (self.tag is None) == (self.digest is None):
            raise ValueError("give exactly one of 'tag' or 'digest'")
        return self

    @field_validator("repository")
    @classmethod
    def _repository(cls, v: str) -> str:
        m = ECR_REGISTRY_RE.match(v)
        name = m["name"] if m else v
        if not ECR_REPOSITORY_RE.match(name):
            raise ValueError(
                f"{v!r} is not an ECR repository name (lowercase letters, digits, '.', '_', '-' "
                "and '/' between parts) nor ACCOUNT.dkr.ecr.REGION.amazonaws.com/NAME"
            )
        return v

    @property
    def reference(self) -> str:
        """The suffix after the repository in an image URI: ``:TAG`` or ``@sha256:...``."""
        return f"@{self.digest}" if self.digest else f":{self.tag}"

    @property
    def external(self) -> re.Match[str] | None:
        """The registry parts when ``repository`` is a full address of someone else's repository."""
        return ECR_REGISTRY_RE.match(self.repository)

    def repository_name(self, prefix: str) -> str:
        """The repository's name in its registry: ``PREFIX/NAME`` for the environment's own."""
        m = self.external
        return m["name"] if m else f"{prefix.lower()}/{self.repository}"


class Architecture(_Strict):
    """The shape numbers the capacity planner and target-module checks need."""

    hidden_size: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    num_hidden_layers: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    parameters: int = Field(gt=0, description="total parameter count")

    def module_shapes(self) -> dict[str, tuple[int, int]]:
        """(in_features, out_features) of every LoRA-targetable projection in one layer."""
        h, i = self.hidden_size, self.intermediate_size
        q = self.num_attention_heads * self.head_dim
        kv = self.num_key_value_heads * self.head_dim
        return {
            "q_proj": (h, q),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (q, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }


class BaseModelEntry(_Strict):
    """A base model and its compatibility tuple: what every adapter of it is bound to."""

    model_id: str = Field(min_length=1)
    source: Literal["hub", "local"] = "hub"
    revision: str = Field(min_length=1)
    tokenizer_sha256: str | None = Field(
        default=None,
        description="sha256 over the tokenizer files; computed and checked at container start",
    )
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    quantization: Literal["none", "nf4"] = "none"
    max_lora_rank: int = Field(gt=0, le=512)
    image: ImageRef
    architecture: Architecture
    model_data: str | None = Field(
        default=None,
        description="S3 URI of the base weights (model.tar.gz or a prefix) the base IC loads",
    )

    @field_validator("tokenizer_sha256")
    @classmethod
    def _sha(cls, v: str | None) -> str | None:
        if v is not None and not SHA256_RE.match(v):
            raise ValueError("must be 64 lowercase hex characters")
        return v

    @model_validator(mode="after")
    def _exact_revision(self) -> BaseModelEntry:
        if self.source == "hub" and not GIT_SHA_RE.match(self.revision):
            raise ValueError(
                f"revision {self.revision!r} is not an exact commit (40 hex characters); "
                "a branch or tag can move under the adapters trained on it"
            )
        return self


#: A tenant in the catalog: ``NAME`` (a role or user name in the environment's own account),
#: ``ACCOUNT:NAME`` (another account's), ``ACCOUNT:*`` (every caller of that account) or ``*``.
#: ``NAME`` (a role), ``user/NAME`` (an IAM user), either as ``ACCOUNT:...``, ``ACCOUNT:*`` or ``*``
#: (lambda_proxy/auth.py says why users are a kind of their own).
#: ASCII only, as IAM names are (and as CloudWatch requires of a dimension value).
TENANT_RE = re.compile(r"^(\*|(\d{12}:)?(user/)?[\w+=,.@-]{1,64}|\d{12}:\*)$", re.ASCII)


class AccessPolicy(_Strict):
    """Who may call an adapter. Empty lists mean nobody: access is never implicit.

    Tenants are account-qualified: a bare name is that role or user name in this environment's
    own account, never the same name in another account.
    """

    tenants: list[str] = Field(default_factory=list)
    principals: list[str] = Field(
        default_factory=list, description="IAM principal ARNs (roles, users, assumed roles)"
    )

    @field_validator("tenants")
    @classmethod
    def _tenants(cls, v: list[str]) -> list[str]:
        for t in v:
            if not TENANT_RE.match(t):
                raise ValueError(
                    f"{t!r} is not a tenant: NAME or user/NAME (this account), ACCOUNT:NAME, "
                    "ACCOUNT:user/NAME, ACCOUNT:* or *"
                )
        return v


def cap_problem(quota: QuotaLimits | None, cap: int) -> str | None:
    """Why ``quota`` could never admit a request at the token cap, if it could not: the router
    charges a request its ``max_new_tokens`` plus an estimate of its prompt, so a
    tokens-per-minute limit at or under the cap refuses every request at the cap (a 400)."""
    limit = quota.tokens_per_minute if quota is not None else None
    if limit is not None and limit <= cap:
        return (
            f"tokens_per_minute {limit} is not above max_new_tokens_cap {cap}: a request at "
            "the cap plus its prompt could never be admitted; raise the limit or lower the "
            "cap"
        )
    return None


class TrainingOverrides(_Strict):
    learning_rate: float | None = Field(default=None, gt=0)
    epochs: float | None = Field(default=None, gt=0)
    max_steps: int | None = None
    weight_decay: float | None = Field(default=None, ge=0)
    eval_steps: int | None = Field(default=None, gt=0)
    early_stopping_patience: int | None = Field(default=None, gt=0)
    batch_size: int | None = Field(default=None, gt=0)
    max_length: int | None = Field(default=None, gt=0)

    def apply(self, profile: TaskProfile) -> TaskProfile:
        return profile.model_copy(update=self.model_dump(exclude_none=True))


class TrainingPlan(_Strict):
    """How one environment trains: its hardware sets the schedule (a CPU machine takes fewer,
    larger steps than a GPU job), on top of the task profile and the entry's own overrides."""

    instance_type: str = Field(
        default="ml.g5.2xlarge",
        pattern=r"^ml\.[a-z0-9]+\.[a-z0-9]+$",
        description="the SageMaker training jobs' instance type; make preflight checks its "
        "'INSTANCE for training job usage' quota (0 on most new accounts)",
    )
    defaults: TrainingOverrides = Field(default_factory=TrainingOverrides)
    tasks: dict[str, TrainingOverrides] = Field(
        default_factory=dict,
        description="per task: a built-in profile's name or a task a catalog entry defines",
    )
    adapters: dict[str, TrainingOverrides] = Field(
        default_factory=dict,
        description="per adapter entry, last (a low-rank variant may need more steps here)",
    )

    def apply(self, profile: TaskProfile, adapter: str | None = None) -> TaskProfile:
        profile = self.defaults.apply(profile)
        for overrides in (self.tasks.get(profile.task), self.adapters.get(adapter or "")):
            if overrides is not None:
                profile = overrides.apply(profile)
        return profile


#: An adapter version as the catalog writes it (also part of the archive's S3 key).
VERSION_PATTERN = r"^[0-9A-Za-z][0-9A-Za-z.+\-]{0,63}$"


class NoCanaryError(ValueError):
    """A canary version was asked for (``--canary``) of an entry without a canary."""


class _Published(_Strict):
    """What ``training.publish`` records of one version: its archive, the archive's and the
    weights' sha256 (the runtime reports the weights' with every answer; the router caches an
    answer only when it matches), and the base revision its gate ran on (``make check``
    refuses a catalog whose base moved on since)."""

    artifact: str | None = Field(
        default=None, description="an archive published elsewhere (s3://...tar.gz) to serve as is"
    )
    sha256: str | None = Field(
        default=None, description="the archive's sha256, written by `make release` (publish)"
    )
    weights_sha256: str | None = Field(
        default=None, description="the adapter weights' sha256, written by publish"
    )
    gated_base_revision: str | None = Field(
        default=None, description="the base revision the gate ran on, written by publish"
    )

    @field_validator("artifact")
    @classmethod
    def _artifact(cls, v: str | None) -> str | None:
        if v is not None and not ARTIFACT_RE.match(v):
            raise ValueError(f"{v!r} is not an S3 URI of a .tar.gz (s3://bucket/key.tar.gz)")
        return v

    @field_validator("sha256", "weights_sha256")
    @classmethod
    def _sha(cls, v: str | None) -> str | None:
        if v is not None and not SHA256_RE.match(v):
            raise ValueError("must be 64 lowercase hex characters")
        return v

    def published(self) -> dict[str, str]:
        """The recorded fields that are set (a promotion or rollback carries them over)."""
        return self.model_dump(include=set(_Published.model_fields), exclude_none=True)


class CanaryConfig(_Published):
    """A second version of an adapter served beside the stable one, to a share of requests.

    AWS's LoRA guidance: "a dynamic update still deserves staged validation and a known
    previous adapter". The canary is an adapter component of its own, so the stable version is
    never touched while it runs; the router sends it ``weight`` percent of new session keys and
    stops sending it any (``lambda_proxy.canary``) when its error rate over a window passes
    ``max_error_rate``. ``artifact``/``sha256``/``weights_sha256``/``gated_base_revision`` are
    written by ``python -m training.publish --canary``, as for the stable version.

    With ``shadow`` set, callers see only the stable version at first: the router mirrors that
    share of stable's buffered requests to the canary after answering, compares both answers'
    label-free quality signals on the same input (``contracts.quality``), and rolls the canary
    back when it is worse by more than a signal's margin with confidence, or promotes it to a
    ``weight`` split when ``promote_after`` pairs show it is not (``lambda_proxy.shadow``).
    """

    version: str = Field(pattern=VERSION_PATTERN)
    shadow: float | None = Field(
        default=None,
        gt=0.0,
        le=0.5,
        description="shadow mode: the share of the stable version's buffered requests mirrored "
        "to the canary after the caller has its answer; callers see only stable's answers "
        "until the paired quality test promotes the canary (lambda_proxy.shadow)",
    )
    weight: int | None = Field(
        default=None,
        ge=1,
        le=50,
        validate_default=True,
        description="percent of session keys sent to the canary; in shadow mode, once it is "
        "promoted to a split (default 10 there; required otherwise)",
    )
    margins: dict[str, float] = Field(
        default_factory=dict,
        description="how much worse than stable the canary may be on a quality signal before "
        "it is rolled back, by signal (json_valid, facts_kept, pii_leaked, repetition, "
        "answered); a signal left out has its default",
    )
    min_pairs: int = Field(
        default=30,
        ge=20,
        le=10_000,
        description="mirrored pairs between two looks of the paired test (its first look is at "
        "this many)",
    )
    promote_after: int = Field(
        default=200,
        ge=20,
        le=1_000_000,
        description="pairs after which a canary that is not worse on any signal is promoted",
    )
    promote: Literal["split", "hold"] = Field(
        default="split",
        description="what a promotion does: split (the canary takes ``weight`` percent of "
        "session keys) or hold (only logged and counted; the canary stays a shadow)",
    )
    confidence: float = Field(
        default=0.95,
        ge=0.8,
        lt=1.0,
        description="the paired test's confidence over all its looks and signals",
    )
    max_error_rate: float = Field(
        default=0.05,
        gt=0.0,
        lt=1.0,
        description="the canary's 5xx share over a window past which the router rolls it back",
    )
    window_s: int = Field(default=300, ge=10, le=3600, description="the error-rate window")
    min_requests: int = Field(
        default=20, ge=1, description="canary requests in a window before its rate can decide"
    )
    min_callers: int = Field(
        default=2,
        ge=1,
        description="distinct voices whose canary requests failed before the rate can decide "
        "(a container 500 can be one tenant's input), and in shadow mode the voices the quality "
        "test weighs, none carrying more than 1/min_callers of the evidence; a voice is a tenant "
        "or principal of this account the entry names, this account's wildcard, or another "
        "account; capped at the voices the entry admits",
    )

    @field_validator("weight")
    @classmethod
    def _weight(cls, weight: int | None, info: ValidationInfo) -> int:
        if weight is not None:
            return weight
        if info.data.get("shadow") is None:
            raise ValueError(
                "a canary needs a weight (the percent of session keys it serves), or shadow "
                "(the share of requests mirrored to it while it is judged)"
            )
        return 10

    @field_validator("margins")
    @classmethod
    def _known_signals(cls, margins: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(margins) - set(SIGNALS))
        if unknown:
            raise ValueError(
                f"unknown quality signal(s) {', '.join(unknown)}; the signals are "
                f"{', '.join(SIGNALS)}"
            )
        bad = sorted(k for k, v in margins.items() if not 0.0 <= v <= 1.0)
        if bad:
            raise ValueError(f"margin of {', '.join(bad)} must be between 0 and 1")
        return margins

    @model_validator(mode="after")
    def _looks(self) -> CanaryConfig:
        if self.shadow is not None and self.promote_after < self.min_pairs:
            raise ValueError(
                f"promote_after ({self.promote_after}) is fewer pairs than the test's first "
                f"look (min_pairs {self.min_pairs})"
            )
        return self


class PreviousVersion(_Published):
    """The version a promotion replaced: what ``make rollback`` writes back (its archive stays
    in S3, since publish never overwrites a version's key)."""

    version: str = Field(pattern=VERSION_PATTERN)


class AdapterEntry(_Published):
    name: str = Field(min_length=1, description="the adapter's name in every request and URL")
    version: str = Field(
        pattern=VERSION_PATTERN, description="bumped for every new archive (publish refuses reuse)"
    )
    base: str = Field(description="a key of base_models")
    task: str = Field(
        description="a built-in task (its profile: dataset, metric, rank) or a custom task's name"
    )
    description: str = ""
    rank: int | None = Field(default=None, gt=0, description="LoRA rank; default: the task's")
    alpha: int | None = Field(default=None, gt=0, description="LoRA alpha; default: the task's")
    targets: Targets | None = Field(
        default=None, description="which linear layers LoRA adapts; default: the task's"
    )
    dropout: float | None = Field(
        default=None, ge=0.0, lt=1.0, description="LoRA dropout; default: the task's"
    )
    training: TrainingOverrides = Field(default_factory=TrainingOverrides)
    dataset: str | None = Field(
        default=None,
        description="a built-in generator (a task's name; default: the entry's task), a "
        "JSONL, CSV or Parquet file in the repository, or an s3:// URI of one "
        "(config.dataset_files)",
    )
    dataset_seed: int = Field(default=0, description="the built-in generator's seed")
    instruction: str | None = Field(
        default=None,
        min_length=1,
        description="the system instruction the adapter is trained and served with (a custom "
        "task's own; on a built-in task it replaces the profile's)",
    )
    metric: str | None = Field(
        default=None,
        description=f"a custom task's gate metric: {', '.join(CUSTOM_METRICS)}",
    )
    minimums: dict[str, float] | None = Field(
        default=None, description="test-split floors by metric (a custom task's own)"
    )
    maximums: dict[str, float] | None = Field(
        default=None, description="test-split ceilings by metric (a custom task's own)"
    )
    #: Records in the entry's dataset file, counted by the loader (a custom task's default
    #: rank follows it); None for a generator or an S3 object not read here.
    _dataset_records: int | None = PrivateAttr(default=None)
    allow: AccessPolicy = Field(default_factory=AccessPolicy)
    pin: bool = Field(
        default=False, description="kept loaded on the accelerator (never evicted by the LRU)"
    )
    quota: QuotaLimits | None = Field(
        default=None, description="per-tenant limits on this adapter, besides the environment's"
    )
    cache: Literal["tenant", "shared", "off"] = Field(
        default="tenant",
        description="who a cached answer may be shown to: the asking tenant only (default), "
        "every caller allowed to use the adapter (shared), or nobody (off)",
    )
    json_schema: str | None = Field(
        default=None,
        description="the JSON Schema this adapter's requests are decoded to when they name none "
        "of their own: a built-in one by name (config/schemas/NAME.json) or a .json file "
        "relative to the catalog",
    )
    #: The schema file's document, read and checked by the loader (``config.loader``).
    _json_schema_document: dict | None = PrivateAttr(default=None)
    canary: CanaryConfig | None = Field(
        default=None, description="a second version served to a share of requests"
    )
    previous: PreviousVersion | None = Field(
        default=None, description="the version the last promotion replaced (make rollback)"
    )
    serving: Literal["adapter", "merged"] = Field(
        default="adapter",
        description="adapter: an adapter component on the shared base; merged: the adapter "
        "merged into its base (training.merge), served by a base component of its own",
    )

    def version_made(self, canary: bool) -> str:
        """The version a training run or a publish makes: the entry's, or with ``canary`` its
        canary's."""
        if not canary:
            return self.version
        if self.canary is None:
            raise NoCanaryError(
                f"adapter {self.name!r} has no canary: add canary: {{version: V, "
                "weight: PERCENT}} to its catalog entry first"
            )
        return self.canary.version

    @model_validator(mode="after")
    def _versions(self) -> AdapterEntry:
        if self.canary is not None and self.serving == "merged":
            raise ValueError(
                "a merged entry (serving: merged) cannot carry a canary: a canary is an adapter "
                "component beside the stable one; canary the version as an adapter first"
            )
        if self.canary is not None and self.canary.version == self.version:
            raise ValueError(
                f"canary.version {self.version!r} is the stable version: a canary is another "
                "version (promote it with make promote ADAPTER=NAME)"
            )
        return self

    @field_validator("json_schema")
    @classmethod
    def _schema_path(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if v.endswith(".json"):
            if v.startswith("/") or ".." in v.split("/"):
                raise ValueError(f"{v!r} must be a .json file inside the catalog's directory")
        elif not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,62}", v):
            raise ValueError(f"{v!r} is neither a built-in schema name nor a .json file")
        return v

    @property
    def json_schema_document(self) -> dict | None:
        return self._json_schema_document

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not SAGEMAKER_NAME_RE.match(v):
            raise ValueError(
                f"{v!r} is not a valid inference-component name part: letters, digits and "
                "inner hyphens only (^[a-zA-Z0-9](-*[a-zA-Z0-9])*$)"
            )
        if v.lower() in RESERVED_ADAPTER_NAMES:
            raise ValueError(f"{v!r} is reserved for the platform's own components")
        return v

    @field_validator("task")
    @classmethod
    def _task(cls, v: str) -> str:
        if v not in TASK_PROFILES and not re.fullmatch(r"[a-z][a-z0-9_]{0,62}", v):
            raise ValueError(
                f"{v!r} is neither a built-in task ({', '.join(sorted(TASK_PROFILES))}) nor a "
                "custom task name (lower-case letters, digits and underscores)"
            )
        return v

    @field_validator("dataset")
    @classmethod
    def _dataset(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if v.startswith("s3://"):
            if not S3_DATASET_RE.match(v):
                raise ValueError(f"{v!r} is not an S3 URI of a {', '.join(FORMATS)} file")
        elif is_file_dataset(v):
            if v.startswith("/"):
                raise ValueError(f"{v!r}: name a file inside the repository, by relative path")
        elif v not in TASK_PROFILES:
            raise ValueError(
                f"{v!r} is neither a built-in generator ({', '.join(sorted(TASK_PROFILES))}) "
                f"nor a dataset file ({', '.join(FORMATS)}, or s3://...)"
            )
        return v

    def task_problems(self) -> list[tuple[str, str]]:
        """(field, why) for a task the entry defines itself and does not define whole, or a
        metric a built-in task does not take (``config.loader`` reports them by field)."""
        if self.task in TASK_PROFILES:
            built_in = TASK_PROFILES[self.task].metric
            own = "; a task of your own (a new task name) takes its own"
            problems = [
                (f, f"task {self.task!r} is built in and keeps its {f}{own}")
                for f in ("minimums", "maximums")
                if getattr(self, f) is not None
            ]
            if self.metric is not None and self.metric != built_in:
                problems.append(
                    ("metric", f"task {self.task!r} is built in and gated on {built_in}{own}")
                )
            # The built-in scorers read what their generators record beside each record (the
            # facts, PII values); a file has none of it, so their floors would be empty.
            if self.dataset_file is not None and self.task not in FILE_TASKS:
                problems.append(
                    (
                        "dataset",
                        f"task {self.task!r} scores what its generator "
                        "records beside each example; train a file on a task of your "
                        "own (task: a new name, with instruction and metric)",
                    )
                )
            return problems
        missing = [f for f in ("instruction", "metric") if getattr(self, f) is None]
        if not is_file_dataset(self.dataset):
            missing.append("dataset (a file of yours: path/to/file.jsonl)")
        problems = []
        if missing:
            known = ", ".join(sorted(TASK_PROFILES))
            problems.append(
                (
                    "task",
                    f"task {self.task!r} is not built in ({known}), so the entry defines it; "
                    f"missing: {', '.join(missing)}",
                )
            )
        if self.metric is not None and self.metric not in CUSTOM_METRICS:
            problems.append(
                ("metric", f"{self.metric!r} is not one of {', '.join(CUSTOM_METRICS)}")
            )
        for field in ("minimums", "maximums"):
            problems += [(field, why) for why in self._bound_problems(getattr(self, field) or {})]
        if self.metric == "json_schema" and self.json_schema is None:
            problems.append(
                (
                    "json_schema",
                    "metric json_schema checks outputs against the entry's json_schema: name one",
                )
            )
        return problems

    def _bound_problems(self, bounds: dict[str, float]) -> list[str]:
        """Floors or ceilings that the gate could never meet, or would always meet: a score
        the metric does not compute, a value off its scale, a chrF floor written as a share,
        or faithfulness, which a team's records (no facts recorded) always score 1.0 on."""
        unknown = sorted(set(bounds) - set(SCORE_COLUMNS))
        if unknown:
            return [
                f"{unknown} are not scores (known: {', '.join(SCORE_COLUMNS)}; chrf is 0-100, "
                "the rest 0-1)"
            ]
        metric = self.metric or "chrf"
        columns = METRIC_COLUMNS.get(metric, COMMON_COLUMNS)
        problems = []
        for name, value in sorted(bounds.items()):
            # "score" is the metric's headline, on that column's scale (chrf: 0-100).
            scale = headline(metric) if name == "score" else name
            top = 100.0 if scale in PERCENT_COLUMNS else 1.0
            if name not in columns:
                problems.append(
                    f"{name}: metric {metric} does not compute it (it computes "
                    f"{', '.join(columns)}), so the gate would always refuse"
                )
            elif not 0.0 <= value <= top:
                problems.append(f"{name}: {value} is off its scale of 0 to {top:g}")
            elif scale in PERCENT_COLUMNS and 0.0 < value <= 1.0:
                problems.append(
                    f"{name}: {value} on chrF's scale of 0 to 100 lets almost anything pass; "
                    f"for a share write {value * 100:g}"
                )
            elif name == "faithfulness" and self.dataset_file is not None:
                problems.append(
                    "faithfulness: a team's records carry no list of facts, so every answer "
                    "scores 1.0 on it; gate on metric facts instead"
                )
        return problems

    @property
    def dataset_file(self) -> str | None:
        """The dataset file (path or s3:// URI) the entry trains on, if not a generator."""
        return self.dataset if is_file_dataset(self.dataset) else None

    @property
    def dataset_records(self) -> int | None:
        return self._dataset_records

    def profile(self) -> TaskProfile:
        """The task profile with this entry's overrides applied."""
        if self.task in TASK_PROFILES:
            base = TASK_PROFILES[self.task]
        else:
            base = custom_profile(
                self.task,
                instruction=self.instruction or "",
                metric=self.metric or "chrf",
                description=self.description,
                records=self._dataset_records,
            )
        updates: dict[str, object] = {
            k: v
            for k, v in {
                "rank": self.rank,
                "alpha": self.alpha,
                "targets": self.targets,
                "dropout": self.dropout,
                "instruction": self.instruction,
                "minimums": self.minimums,
                "maximums": self.maximums,
            }.items()
            if v is not None
        }
        return self.training.apply(base.model_copy(update=updates))

    @property
    def target_modules(self) -> tuple[str, ...]:
        return TARGET_MODULES[self.profile().targets]


class Catalog(_Strict):
    base_models: dict[str, BaseModelEntry]
    adapters: list[AdapterEntry] = Field(default_factory=list)


class EngineKind(StrEnum):
    """The model server. One: this project's runtime on vLLM. ``lmi`` (AWS's LMI image) was
    removed: it runs the same vLLM without the runtime's adapter checks, artifact identity,
    request bounds and CPU build, so it could be neither tested here nor smoke-checked there."""

    runtime = "runtime"


#: A rolling update of the base component replaces this share of its copies per batch
#: (infra/serving.py; SageMaker takes 5 to 50%).
ROLLOUT_BATCH_PERCENT = 50


class ServingConfig(_Strict):
    instance_type: str = Field(pattern=r"^ml\.[a-z0-9]+\.[a-z0-9]+$")
    initial_instance_count: int = Field(default=1, ge=1)
    min_instance_count: int = Field(default=1, ge=0)
    max_instance_count: int = Field(default=1, ge=1)
    base_copies: int = Field(default=1, ge=1)
    max_base_copies: int = Field(default=1, ge=1)
    accelerators: int = Field(default=1, ge=0)
    memory_mb: int = Field(default=12288, ge=1024)
    cpu_cores: float = Field(default=2, gt=0)
    max_loras: int | None = Field(default=None, ge=1, description="None: the planner decides")
    max_cpu_loras: int = Field(default=RuntimeSettings.default("max_cpu_loras"), ge=1)
    vram_headroom: float = Field(default=RuntimeSettings.default("vram_headroom"), gt=0.0, le=1.0)
    kv_cache_gb: float = Field(default=4.0, ge=0.0)
    startup_timeout_s: int = Field(default=900, ge=60, le=3600)
    rollout_wait_s: int = Field(
        default=300,
        ge=0,
        le=3600,
        description="seconds a rolling update of the base component waits between copies, "
        "watching the 5xx alarm",
    )
    max_batch_size: int | None = Field(
        default=None,
        ge=1,
        description="vLLM's max_num_seqs; None: the planner sizes it from the KV cache (make plan)",
    )
    planned_context_tokens: int = Field(
        default=1024,
        ge=16,
        description="prompt plus answer of a typical request: the planner's batch is the KV "
        "cache's tokens over it",
    )

    @model_validator(mode="after")
    def _counts(self) -> ServingConfig:
        if self.min_instance_count > self.max_instance_count:
            raise ValueError("min_instance_count exceeds max_instance_count")
        if self.base_copies > self.max_base_copies:
            raise ValueError("base_copies exceeds max_base_copies")
        if self.accelerators > 0 and self.cpu_cores < 2 + self.accelerators:
            # vLLM's optimization guide ("CPU Resources for GPU Deployments"): at least 2 + N
            # CPU cores for N GPUs; the engine core's busy loop is "particularly sensitive to
            # CPU starvation", and its compile and CUDA-graph capture at start run on them.
            raise ValueError(
                f"cpu_cores {self.cpu_cores:g} is under the {2 + self.accelerators} vLLM asks "
                f"for {self.accelerators} GPU(s) (2 + N): its engine loop and start-up compile "
                "starve below it; raise cpu_cores (an instance with more vCPUs if it must)"
            )
        if (needed := self.instances_for_a_rollout()) > self.max_instance_count:
            raise ValueError(
                f"max_instance_count {self.max_instance_count} leaves no room for a rolling "
                f"update at max_base_copies {self.max_base_copies}: SageMaker provisions each "
                f"batch ({ROLLOUT_BATCH_PERCENT}% of the copies) before it retires the old one "
                "(InferenceComponentRollingUpdatePolicy.MaximumBatchSize), so the update would "
                f"run to its timeout and roll back; raise serving.max_instance_count to {needed}"
            )
        return self

    def instances_for_a_rollout(self, components: int = 1) -> int:
        """Instances the largest rolling update needs: every copy of ``components`` base-like
        components (the base, and each ``serving: merged`` entry's) at ``max_base_copies``,
        plus one batch of new ones, at as many copies per instance as accelerators allow."""
        device = DEVICES.get(self.instance_type)
        if self.accelerators == 0 or device is None:
            return 0  # CPU copies share an instance; an unknown type is the planner's to refuse
        per_instance = max(1, device[2] // self.accelerators)
        batch = math.ceil(self.max_base_copies * ROLLOUT_BATCH_PERCENT / 100)
        return math.ceil((components * self.max_base_copies + batch) / per_instance)


class CacheConfig(_Strict):
    engine: Literal["valkey", "redis"] = "valkey"
    node_type: str = Field(default="cache.t4g.small", pattern=r"^cache\.[a-z0-9]+\.[a-z0-9]+$")
    replicas: int = Field(default=0, ge=0, le=5)
    multi_az: bool = False
    port: int = Field(default=6380, ge=1024, le=65535)
    ttl_hours: int = Field(default=72, ge=1, le=24 * 30)
    snapshot_retention_days: int = Field(default=15, ge=0, le=35)

    @model_validator(mode="after")
    def _multi_az(self) -> CacheConfig:
        if self.multi_az and self.replicas < 1:
            raise ValueError("multi_az needs at least one replica")
        if self.port in (6379,):
            raise ValueError("use a non-default port (6379 is the well-known Redis port)")
        return self


#: Seconds a stream's deadline leaves before the Lambda's and the gateway's timeouts.
STREAM_MARGIN_S = 10


class RouterConfig(_Strict):
    provisioned_concurrency: int = Field(default=0, ge=0)
    reserved_concurrency: int = Field(
        default=50, ge=1, description="ceiling on concurrent router executions (and cost)"
    )
    waf_rate_limit_per_5min: int = Field(default=2000, ge=10, le=2_000_000_000)
    # The API's integrations stream (response transfer mode STREAM), which API Gateway allows
    # up to 15 minutes (900 s); buffered integrations end at 29 s unless a quota is raised.
    # The router answers within its own deadlines, shorter than both timeouts, with a clear 504.
    gateway_timeout_s: int = Field(default=150, ge=1, le=900)
    timeout_s: int = Field(default=150, ge=10, le=900)
    invoke_deadline_s: float = Field(
        default=RouterSettings.default("invoke_deadline_s"),
        gt=0,
        le=60,
        description="a buffered generation's deadline (SageMaker's own limit is 60 s)",
    )
    stream_deadline_s: float = Field(
        default=RouterSettings.default("stream_deadline_s"),
        gt=0,
        description="how long a streamed generation may run",
    )
    #: Version of AWS's Lambda Web Adapter layer (arm64) the router runs behind: it streams the
    #: Python function's response. awslabs/aws-lambda-web-adapter publishes it from account
    #: 753240598075; AWS's REST streaming sample (serverless-patterns) uses version 25.
    web_adapter_layer_version: int = Field(default=25, ge=1)
    web_adapter_layer_arn: str | None = Field(
        default=None,
        pattern=r"^arn:aws[a-z-]*:lambda:[a-z0-9-]+:\d{12}:layer:[A-Za-z0-9_-]+:\d+$",
        description="the Lambda Web Adapter layer (arm64) by ARN, where AWS's public one is not "
        "published (the aws-cn and aws-us-gov partitions): a copy in your account",
    )
    memory_mb: int = Field(default=512, ge=128, le=10240)
    max_new_tokens_cap: int = Field(default=RouterSettings.default("max_new_tokens_cap"), ge=1)
    max_stop_sequences: int = Field(default=RouterSettings.default("max_stop_sequences"), ge=0)
    max_body_bytes: int = Field(
        default=RouterSettings.default("max_body_bytes"), ge=1024, le=6 * 1024 * 1024
    )
    operators: list[str] = Field(
        default_factory=list,
        description="IAM principal ARNs that may call every adapter (smoke checks, on-call)",
    )
    quota: QuotaLimits = Field(
        default_factory=QuotaLimits, description="per-tenant limits across every adapter"
    )
    throttle_rate: float = Field(default=50, gt=0)
    throttle_burst: int = Field(default=100, gt=0)

    @field_validator("operators")
    @classmethod
    def _operators(cls, v: list[str]) -> list[str]:
        for arn in v:
            if not re.match(r"^arn:aws[a-z-]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+$", arn):
                raise ValueError(f"{arn!r} is not an IAM role or user ARN")
        return v

    @property
    def generation_timeout_s(self) -> float:
        """The model server's own deadline per request (``OPTION_REQUEST_TIMEOUT_S``): the
        longest the router waits for one, so the container never cuts a stream the router
        still reads (the runtime's default, 60 s, would end a 120 s stream at 60 s)."""
        return max(self.invoke_deadline_s, self.stream_deadline_s)

    @model_validator(mode="after")
    def _deadline(self) -> RouterConfig:
        ceiling = min(self.timeout_s, self.gateway_timeout_s)
        if self.invoke_deadline_s >= ceiling:
            raise ValueError(
                "invoke_deadline_s must be shorter than the Lambda timeout_s and the "
                "gateway_timeout_s"
            )
        # A stream reports its deadline in an error event; that needs time left after it.
        if self.stream_deadline_s + STREAM_MARGIN_S > ceiling:
            raise ValueError(
                f"stream_deadline_s must end at least {STREAM_MARGIN_S} s before the Lambda "
                "timeout_s and the gateway_timeout_s"
            )
        if self.provisioned_concurrency > self.reserved_concurrency:
            raise ValueError("provisioned_concurrency exceeds reserved_concurrency")
        if (problem := cap_problem(self.quota, self.max_new_tokens_cap)) is not None:
            raise ValueError(f"quota.{problem}")
        return self


class PipelineConfig(_Strict):
    """``config/pipeline.yaml``: the optional CDK Pipelines stack (deploys from AWS itself)."""

    enabled: bool = False
    repository: str = Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$", description="owner/name")
    branch: str = Field(default="main", min_length=1)
    connection_arn: str = Field(
        pattern=r"^arn:aws[a-z-]*:(codestar-connections|codeconnections):[a-z0-9-]+:\d{12}:"
        r"connection/[A-Za-z0-9-]+$",
        description="CodeStar / CodeConnections connection to the repository host",
    )
    account: str | None = Field(default=None, pattern=r"^\d{12}$")
    region: str = Field(default="us-east-1", pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")
    stages: list[str] = Field(default_factory=lambda: ["dev", "staging", "prod"], min_length=1)
    approval_before: list[str] = Field(default_factory=lambda: ["prod"])

    @model_validator(mode="after")
    def _not_the_placeholders(self) -> PipelineConfig:
        """The shipped file's placeholders pass the patterns; an enabled pipeline with them
        would deploy and then never read its source."""
        if self.enabled:
            if "region" not in self.model_fields_set:
                raise ValueError("region: required for an enabled pipeline (e.g. eu-west-1)")
            if self.repository.startswith("your-org/"):
                raise ValueError("repository is the shipped placeholder: name your owner/name")
            if re.search(
                r":111111111111:|connection/0{8}-0{4}-0{4}-0{4}-0{12}$", self.connection_arn
            ):
                raise ValueError(
                    "connection_arn is the shipped placeholder: create a CodeConnections "
                    "connection to your repository host and give its ARN"
                )
        return self

    @model_validator(mode="after")
    def _stages(self) -> PipelineConfig:
        if len(set(self.stages)) != len(self.stages):
            raise ValueError("stages repeat an environment")
        unknown = set(self.approval_before) - set(self.stages)
        if unknown:
            raise ValueError(f"approval_before names environments not in stages: {sorted(unknown)}")
        return self


class NetworkConfig(_Strict):
    """The VPC. Its zones are chosen here, never looked up at synth (``infra.stacks``)."""

    cidr: str = Field(default="10.40.0.0/16", pattern=r"^\d+\.\d+\.\d+\.\d+/\d+$")
    max_azs: int = Field(
        default=2,
        ge=2,
        le=6,
        description="how many zones, when availability_zones names none: the first N that "
        "Fn::GetAZs lists in the account and region at deploy time",
    )
    availability_zones: list[str] | None = Field(
        default=None,
        min_length=2,
        description="the zones by name (REGION + letter), in place of the first max_azs; "
        "make preflight checks that the account has them",
    )

    @model_validator(mode="after")
    def _zones(self) -> NetworkConfig:
        zones = self.availability_zones
        if zones is not None:
            if len(set(zones)) != len(zones):
                raise ValueError(f"availability_zones repeat a zone: {zones}")
            if "max_azs" in self.model_fields_set and self.max_azs != len(zones):
                raise ValueError(
                    f"max_azs is {self.max_azs} but availability_zones names {len(zones)}; "
                    "give one or the other"
                )
        return self


class ObservabilityConfig(_Strict):
    log_retention_days: int = Field(default=365, ge=1)
    alarm_emails: list[str] = Field(
        default_factory=list,
        description="addresses the alarm topic notifies (each confirms its subscription once); "
        "none: subscribe on-call to the topic PREFIX alarms yourself",
    )

    @field_validator("alarm_emails")
    @classmethod
    def _emails(cls, v: list[str]) -> list[str]:
        bad = [a for a in v if not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", a)]
        if bad:
            raise ValueError(f"not e-mail addresses: {bad}")
        return v

    latency_alarm_p99_ms: int = Field(default=20000, ge=1)
    error_alarm_5xx_per_5min: int = Field(default=5, ge=1)


class CostConfig(_Strict):
    """What ``make usage`` splits among tenants: the endpoint's instance-hours at this price."""

    instance_hour_usd: float | None = Field(
        default=None,
        gt=0,
        description="the on-demand price of one instance of serving.instance_type per hour, in "
        "USD (the SageMaker pricing page, Real-Time Inference, for the environment's region); "
        "unset: make usage reports no cost",
    )


class Environment(_Strict):
    name: str
    prefix: str = Field(min_length=1, max_length=40)
    account: str | None = Field(default=None, pattern=r"^\d{12}$")
    region: str = Field(default="us-east-1", pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")
    base: str = Field(description="key of base_models this environment serves")
    base_overrides: dict[str, str] = Field(
        default_factory=dict,
        description="serve catalog base X as Y here (the local platform's tiny stand-in)",
    )
    engine: EngineKind = EngineKind.runtime

    @field_validator("engine", mode="before")
    @classmethod
    def _engine(cls, v: object) -> object:
        if v == "lmi":
            raise ValueError(
                "engine 'lmi' was removed: the runtime serves on vLLM itself (the same engine "
                "LMI wraps) with adapter checks and artifact identity; delete the field"
            )
        return v

    adapters: Literal["all"] | list[str] = "all"
    serving: ServingConfig
    cache: CacheConfig = Field(default_factory=CacheConfig)
    router: RouterConfig = Field(default_factory=RouterConfig)
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    observability: ObservabilityConfig = Field(default_factory=ObservabilityConfig)
    cost: CostConfig = Field(default_factory=CostConfig)
    artifact_bucket: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$",
        description="bucket publish uploads to; default: derived from prefix, account, region",
    )
    deletion_protection: bool = True
    allow_replacement: list[str] = Field(
        default_factory=list,
        description="stateful resources (LOGICAL_ID or STACK/LOGICAL_ID) a change may replace; "
        "`make diff` fails on any other stateful replacement",
    )
    deployable: bool = Field(
        default=True, description="false: runs on one machine only (the local platform)"
    )
    training: TrainingPlan = Field(default_factory=TrainingPlan)

    @field_validator("account", mode="before")
    @classmethod
    def _account_as_written(cls, v: object) -> object:
        """``account: 111122223333`` unquoted is an integer to YAML; an account is 12 digits,
        leading zeros included, so an integer is read back as those 12 digits."""
        if isinstance(v, int) and not isinstance(v, bool):
            if 10**11 <= v < 10**12:
                return str(v)
            # YAML reads an unquoted number with a leading zero as octal (012345670123 is
            # 1402433619) or drops the zero: the digits written are lost, so quote it.
            raise ValueError(
                f'account {v} is not the 12 digits written: quote it (account: "0..."); '
                "YAML reads a number with a leading zero as another number"
            )
        return v

    @model_validator(mode="after")
    def _web_adapter_in_partition(self) -> Environment:
        """awslabs publishes the Lambda Web Adapter layer from its account in the commercial
        regions only; elsewhere the router needs a copy named by ARN."""
        other = self.region.startswith(("cn-", "us-gov-", "us-iso"))
        if self.deployable and other and self.router.web_adapter_layer_arn is None:
            raise ValueError(
                f"router.web_adapter_layer_arn: required in {self.region}, where AWS's public "
                "Lambda Web Adapter layer is not published; publish a copy in your account"
            )
        return self

    @model_validator(mode="after")
    def _zones_in_region(self) -> Environment:
        if self.deployable and "region" not in self.model_fields_set:
            # A default would send every stack and client to us-east-1 without anyone choosing
            # it; the file says where the environment lives.
            raise ValueError("region: required for an environment that deploys (e.g. eu-west-1)")
        zones = self.network.availability_zones or []
        bad = [z for z in zones if not re.fullmatch(rf"{re.escape(self.region)}[a-z]", z)]
        if bad:
            raise ValueError(
                f"network.availability_zones {bad} are not zones of region {self.region} "
                f"(a zone is the region's name and a letter, e.g. {self.region}a)"
            )
        if (problem := layout.bucket_problem(self.prefix, self.region, self.artifact_bucket)) and (
            self.deployable
        ):
            raise ValueError(problem)
        return self

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if not SAGEMAKER_NAME_RE.match(v):
            raise ValueError(f"{v!r} must match ^[a-zA-Z0-9](-*[a-zA-Z0-9])*$")
        return v
