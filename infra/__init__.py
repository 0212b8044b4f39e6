"""The CDK app: one construct per logical unit, composed into per-environment stacks."""
