"""Helpers for reading synthesized templates (the synth fixtures are in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

# -- in-process synth of one environment with edited catalog / environment files -----------------

CONFIG = Path(__file__).resolve().parents[2] / "config"


def edited_config(
    tmp: Path, env: str = "dev", *, catalog=None, environment=None
) -> tuple[Path, Path]:
    """Copies of the catalog and environment files, each passed through an editing function."""
    import shutil

    import yaml

    envs = tmp / "environments"
    shutil.copytree(CONFIG / "environments", envs, dirs_exist_ok=True)
    cat = yaml.safe_load((CONFIG / "adapters.yaml").read_text())
    if catalog is not None:
        catalog(cat)
    (tmp / "adapters.yaml").write_text(yaml.safe_dump(cat, sort_keys=False))
    if environment is not None:
        data = yaml.safe_load((envs / f"{env}.yaml").read_text())
        environment(data)
        (envs / f"{env}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return tmp / "adapters.yaml", envs


#: What the CDK CLI adds to an app's context when it runs it (``cdk synth``/``cdk deploy``):
#: every resource's ``aws:cdk:path`` and the ``AWS::CDK::Metadata`` resource.
CLI_CONTEXT = {"aws:cdk:enable-path-metadata": True, "aws:cdk:version-reporting": True}


def synth_in_process(
    catalog: Path, environments: Path, env: str = "dev", *, cli: bool = False
) -> dict[str, dict]:
    """Templates by stack name, built in this process (no nag packs: templates are the same).
    ``cli``: as the CDK CLI would synthesize them, with its metadata."""
    import json

    from aws_cdk import App

    from config import load_deployment
    from infra.stacks import build

    context = json.loads((CONFIG.parent / "cdk.json").read_text())["context"]
    if cli:
        context = {**context, **CLI_CONTEXT}
    app = App(context=context)
    stacks = build(app, load_deployment(env, catalog, environments))
    assembly = app.synth()
    return {s.stack_name: assembly.get_stack_by_name(s.stack_name).template for s in stacks}


def resources(template: dict, rtype: str) -> dict[str, dict]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == rtype}


PSEUDO = {
    "AWS::AccountId": "123456789012",
    "AWS::Region": "us-east-1",
    "AWS::Partition": "aws",
    "AWS::URLSuffix": "amazonaws.com",
    "AWS::StackName": "stack",
}


def _exported(name: str, templates: dict[str, dict]):
    """The value another stack exports under ``name``, and that stack's template."""
    for template in templates.values():
        for output in template.get("Outputs", {}).values():
            if output.get("Export", {}).get("Name") == name:
                return output["Value"], template
    raise AssertionError(f"no stack exports {name}")


def _attribute(template: dict, logical_id: str, attribute: str, pseudo: dict[str, str]) -> str:
    """The few attributes an address is built from (an ECR repository's ARN)."""
    resource = template["Resources"][logical_id]
    if resource["Type"] == "AWS::ECR::Repository" and attribute == "Arn":
        name = resource["Properties"]["RepositoryName"]
        return f"arn:aws:ecr:{pseudo['AWS::Region']}:{pseudo['AWS::AccountId']}:repository/{name}"
    raise AssertionError(f"cannot resolve GetAtt {logical_id}.{attribute} offline")


def resolve(
    value,
    pseudo: dict[str, str] = PSEUDO,
    templates: dict[str, dict] | None = None,
    template: dict | None = None,
):
    """A template value as CloudFormation would resolve it, for the intrinsics CDK writes into
    names and addresses (Ref of a pseudo parameter, Fn::Join, Fn::Select, Fn::Split, Fn::Sub,
    and, given the other stacks' ``templates``, Fn::ImportValue of an ECR repository's ARN)."""
    import re

    def again(v):
        return resolve(v, pseudo, templates, template)

    if isinstance(value, list):
        return [again(v) for v in value]
    if isinstance(value, dict) and set(value) == {"Fn::ImportValue"} and templates is not None:
        exported, owner = _exported(again(value["Fn::ImportValue"]), templates)
        return resolve(exported, pseudo, templates, owner)
    if isinstance(value, dict) and set(value) == {"Fn::GetAtt"} and template is not None:
        logical_id, attribute = value["Fn::GetAtt"]
        return _attribute(template, logical_id, attribute, pseudo)
    if not isinstance(value, dict):
        return value
    if set(value) == {"Ref"}:
        owner = (template or {}).get("Resources", {}).get(value["Ref"])
        if owner is not None and owner["Type"] == "AWS::ECR::Repository":
            return owner["Properties"]["RepositoryName"]  # Ref of a repository is its name
        if value["Ref"] not in pseudo:
            raise AssertionError(f"cannot resolve Ref {value['Ref']} offline")
        return pseudo[value["Ref"]]
    if set(value) == {"Fn::Join"}:
        sep, parts = value["Fn::Join"]
        return sep.join(str(again(p)) for p in parts)
    if set(value) == {"Fn::Select"}:
        index, items = value["Fn::Select"]
        return again(items)[int(index)]
    if set(value) == {"Fn::Split"}:
        sep, text = value["Fn::Split"]
        return str(again(text)).split(sep)
    if set(value) == {"Fn::Sub"}:
        text = value["Fn::Sub"]
        return re.sub(r"\$\{([^}]+)\}", lambda m: pseudo[m[1]], text)
    raise AssertionError(f"cannot resolve {value} offline")


def policy_arns(template: dict) -> set[str]:
    """Every resource ARN the template's managed policies name, resolved."""
    return {
        resolve(r)
        for p in resources(template, "AWS::IAM::ManagedPolicy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        for r in s["Resource"]
    }


def scoped_list_grants(template: dict) -> list[tuple[str, object]]:
    """SageMaker List- actions a policy in ``template`` grants on named resources. SageMaker's
    guide, "Amazon SageMaker API Permissions": "Except for the ListTags API, resource-level
    restrictions are not available on List- calls": such a grant is denied at run time."""
    found = []
    for r in template["Resources"].values():
        if r["Type"] not in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            continue
        for st in r["Properties"]["PolicyDocument"]["Statement"]:
            actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
            lists = [
                a for a in actions if a.startswith("sagemaker:List") and a != "sagemaker:ListTags"
            ]
            if lists and st["Effect"] == "Allow" and st["Resource"] != "*":
                found += [(a, st["Resource"]) for a in lists]
    return found
