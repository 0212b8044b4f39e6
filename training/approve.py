"""``python -m training.approve --env ENV --adapter NAME --version V --by WHO``: approve one
published version in the Model Registry after a person or a named check has looked.

``make release`` deploys only approved versions (``training.registry.approval_problems``).
``--by`` is recorded on the package (its approval description and ``approved_by`` metadata),
with ``--note`` (what was looked at). ``--status`` lists what the release would refuse.
"""

from __future__ import annotations

import argparse
import sys

from config.loader import CATALOG_PATH, ENVIRONMENTS_DIR, CatalogError, load_deployment
from training.registry import RegistryError, approval_problems, approve


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m training.approve",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--env", required=True)
    ap.add_argument("--adapter")
    ap.add_argument("--version", help="default: the catalog's version of the adapter")
    ap.add_argument("--by", help="who approves: a person or a named check")
    ap.add_argument("--note", default="", help="what was looked at")
    ap.add_argument("--status", action="store_true", help="list the versions not yet approved")
    args = ap.parse_args(argv)
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        dep = load_deployment(args.env, CATALOG_PATH, ENVIRONMENTS_DIR)
        sm = boto3.client("sagemaker", region_name=dep.env.region)
        if args.status:
            problems = approval_problems(sm, dep, args.env)
            print(
                "\n".join(problems) if problems else "every version the release deploys is approved"
            )
            return 1 if problems else 0
        if not args.adapter or not args.by:
            ap.error("--adapter and --by are required (or --status)")
        version = args.version or dep.adapter(args.adapter).entry.version
        pkg = approve(sm, dep, args.adapter, version, by=args.by, note=args.note)
    except KeyError as exc:
        print(f"approve failed: unknown adapter {exc}", file=sys.stderr)
        return 1
    except (RegistryError, CatalogError) as exc:
        print(f"approve failed: {exc}", file=sys.stderr)
        return 1
    except (BotoCoreError, ClientError) as exc:
        print(f"approve failed: AWS said: {exc}", file=sys.stderr)
        return 1
    print(f"{args.adapter} {version}: approved ({pkg.arn}), {pkg.description}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
