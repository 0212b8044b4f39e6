"""Operations commands: release an environment, review a change (catalog diff, template
snapshots, replacements) and smoke-test a deployment. They drive the CDK app in ``infra``, the
catalog and training; the constructs never import them."""
