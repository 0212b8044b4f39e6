"""The adapter catalog, the environment files and the schema that validates them.

Every other package reads configuration through this one: ``load_deployment(env)`` for the
catalog seen through one environment, ``load_catalog()`` for the catalog alone.
"""

from config.loader import (
    CATALOG_PATH,
    ENVIRONMENTS_DIR,
    PIPELINE_PATH,
    CatalogError,
    Deployment,
    Issue,
    ResolvedAdapter,
    environment_names,
    load_catalog,
    load_deployment,
    load_environment,
    load_pipeline,
)
from config.schema import AdapterEntry, BaseModelEntry, Catalog, Environment
from config.tasks import TARGET_MODULES, TASK_PROFILES, Targets, TaskProfile

__all__ = [
    "CATALOG_PATH",
    "ENVIRONMENTS_DIR",
    "PIPELINE_PATH",
    "TARGET_MODULES",
    "TASK_PROFILES",
    "AdapterEntry",
    "BaseModelEntry",
    "Catalog",
    "CatalogError",
    "Deployment",
    "Environment",
    "Issue",
    "ResolvedAdapter",
    "Targets",
    "TaskProfile",
    "environment_names",
    "load_catalog",
    "load_deployment",
    "load_environment",
    "load_pipeline",
]
