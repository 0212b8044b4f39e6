"""What the parts of the platform agree on, in one place.

The model server (``runtime``) and the router (``lambda_proxy``) each ship alone, in a container
image and a Lambda zip, so everything they share with the code that configures them (``infra``,
``local``, ``training``) lives here: each process's settings with their environment names and
defaults, and the compatibility tuple's tokenizer fingerprint. This package imports nothing of
ours and nothing outside the standard library but pydantic, so it ships beside either of them.
"""
