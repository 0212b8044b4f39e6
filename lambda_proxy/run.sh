#!/bin/sh
# The router's entry on Lambda: AWS's Lambda Web Adapter (the layer; AWS_LAMBDA_EXEC_WRAPPER)
# runs this script and relays every invocation to the web app it starts, streaming its answer.
PYTHONPATH="$LAMBDA_TASK_ROOT" exec python -m uvicorn --host 127.0.0.1 --port "${AWS_LWA_PORT:-8080}" \
  --no-access-log --log-level warning lambda_proxy.web:app
