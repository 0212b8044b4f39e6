"""The router's cache as ElastiCache serves it: TLS (``rediss://``) with an AUTH token read from
Secrets Manager, a connection made within its own timeout from a new execution environment,
and a token rotated while environments hold the old one."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
import redis
from moto import mock_aws

from lambda_proxy.cache import ResponseCache, SecretCredentials
from tests.fakes import free_port

pytestmark = pytest.mark.skipif(
    shutil.which("redis-server") is None or shutil.which("openssl") is None,
    reason="needs redis-server (built with TLS) and openssl",
)

TOKEN, ROTATED = "first-auth-token-0123456789", "rotated-auth-token-9876543210"


@pytest.fixture
def tls_redis(tmp_path: Path) -> Iterator[tuple[int, Path, redis.Redis]]:
    """A Redis that accepts only TLS, with AUTH, on a free port; its admin client."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    port = free_port()
    proc = subprocess.Popen(
        [
            "redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
            "--tls-cert-file", str(cert), "--tls-key-file", str(key),
            "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no",
            "--requirepass", TOKEN, "--save", "", "--appendonly", "no", "--dir", str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    admin = redis.Redis(
        host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=str(cert), password=TOKEN
    )
    for _ in range(100):
        try:
            admin.ping()
            break
        except redis.RedisError:
            time.sleep(0.05)
    try:
        yield port, cert, admin
    finally:
        proc.kill()
        proc.wait()


def test_the_cache_over_tls_with_a_rotated_auth_token(tls_redis, monkeypatch) -> None:
    port, cert, admin = tls_redis
    for k, v in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t"}.items():
        monkeypatch.setenv(k, v)
    with mock_aws():
        sm = boto3.client("secretsmanager", region_name="eu-west-1")
        monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
        arn = sm.create_secret(Name="lora-dev-cache-auth", SecretString=TOKEN)["ARN"]
        cache = ResponseCache.from_url(
            f"rediss://127.0.0.1:{port}", 60, SecretCredentials(arn), ssl_ca_certs=str(cert)
        )
        # A new environment's first request: TCP, TLS and AUTH inside the connect timeout.
        assert cache.put("k", {"output": "ok"})
        assert cache.get("k") == {"output": "ok"}

        # The token rotates: Secrets Manager holds the new one, Redis accepts only it, and the
        # environment's connection is gone (as after a failover or an idle drop).
        sm.put_secret_value(SecretId=arn, SecretString=ROTATED)
        admin.config_set("requirepass", ROTATED)
        admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        assert cache.put("k", {"output": "refused"}) is False  # the cached token, refused once
        cache._skip_until = 0.0  # past the breaker's pause
        assert cache.put("k", {"output": "rotated"}), "the token was not read again"
        assert cache.get("k") == {"output": "rotated"}
