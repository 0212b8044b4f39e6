"""The SageMaker quotas the environments need from their accounts: endpoint instances per
instance type, summed over the deployable environments that share an account and region.

A new account's quota for most GPU instance types is 0 ("The account-level service limit
'ml.g5.xlarge for endpoint usage' is 0 Instances", the ResourceLimitExceeded a first
CreateEndpoint meets), and a rolling update of the base component provisions its new batch
before it retires the old copies, so an environment needs its whole ``max_instance_count``
. ``make check`` prints the table; ``make preflight`` compares it
with Service Quotas. Environments that name no account are counted together, as if they shared
one: the safe assumption until each names its own.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from config.loader import ENVIRONMENTS_DIR, environment_names, load_environment

#: Where a quota applies: (account or None, region, instance type).
Place = tuple[str | None, str, str]


def quota_name(instance_type: str) -> str:
    """SageMaker's quota name in Service Quotas."""
    return f"{instance_type} for endpoint usage"


def training_quota_name(instance_type: str) -> str:
    return f"{instance_type} for training job usage"


def endpoint_instances_needed(directory: Path = ENVIRONMENTS_DIR) -> dict[Place, int]:
    need: dict[Place, int] = defaultdict(int)
    for name in environment_names(directory, deployable=True):
        env = load_environment(name, directory)
        if env.serving.accelerators > 0:
            need[(env.account, env.region, env.serving.instance_type)] += (
                env.serving.max_instance_count
            )
    return dict(sorted(need.items(), key=lambda kv: (kv[0][0] or "", kv[0][1], kv[0][2])))


def quota_table(directory: Path = ENVIRONMENTS_DIR) -> list[list[str]]:
    """Rows of account, region, quota name and instances needed."""
    return [
        [account or "(no account set)", region, quota_name(itype), str(n)]
        for (account, region, itype), n in endpoint_instances_needed(directory).items()
    ]
