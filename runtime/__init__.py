"""The model server that runs in the SageMaker container (ships alone: imports no other package)."""
