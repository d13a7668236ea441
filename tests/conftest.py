"""Shared test helpers: paths to the repository's fixtures and to ../shared data."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# DDAI's real data and log formats: ../shared beside the repository, or DDAI_SHARED.
SHARED = Path(os.environ.get("DDAI_SHARED") or ROOT / ".." / "shared").resolve()
FIXTURES = ROOT / "fixtures"
# ``from cli_schemas import check`` (the --json schema check) works from every test folder.
sys.path.insert(0, str(Path(__file__).parent / "cli"))
# Tests that share another test module's fixtures and scripted servers (``from test_collect
# import world``, ``from test_trainer_vlm_grpo import Scripted``) find it whichever folder runs.
for _room in ("episode", "grpo"):
    sys.path.insert(0, str(Path(__file__).parent / "trainer" / _room))
sys.path.insert(0, str(Path(__file__).parent / "pipelines" / "store"))  # test_crash_consistency
sys.path.insert(0, str(Path(__file__).parent / "pipelines" / "funnel"))  # test_funnel_verify_gt

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# TRL's notice on importing its experimental modules, printed once per process.
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
# The suite runs one pytest worker per core; tiny torch models are far slower when each worker
# also spreads its kernels over every core.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def shared() -> Path:
    if not SHARED.is_dir():
        pytest.fail(
            f"shared data folder {SHARED} is missing; tests expect ../shared beside the repo "
            "(or DDAI_SHARED set to it)"
        )
    return SHARED


@pytest.fixture(scope="session", autouse=True)
def _session_workspace(tmp_path_factory):
    """A workspace for module- and session-scoped fixtures too, which run before the per-test
    one below: a report they build keeps its turn facts there, not in ./ddai-work."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DDAI_HOME", str(tmp_path_factory.mktemp("ddai-home-session")))
        yield


@pytest.fixture
def one_torch_thread():
    """torch on one thread for the test (``pytestmark = pytest.mark.usefixtures(...)``)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(autouse=True)
def _isolated_workspace(tmp_path_factory, monkeypatch):
    """Every test gets its own workspace, so nothing writes into ./ddai-work."""
    home = tmp_path_factory.mktemp("ddai-home")
    monkeypatch.setenv("DDAI_HOME", str(home))
    monkeypatch.delenv("DDAI_LOGS", raising=False)
    monkeypatch.delenv("DDAI_CONFIG", raising=False)


# ---------------------------------------------------------------- object storage (S3) tests
# A local S3-compatible server (moto in server mode on 127.0.0.1): one per test module; each test
# gets its own bucket and the AWS_* environment pointing at the server, as a user's shell would.


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(argv: list[str], port: int, probe: str, name: str) -> Iterator[str]:
    """Run a local fake server (``argv``) on ``port`` until the fixture ends; yields its URL once
    ``probe`` answers."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(f"{url}{probe}", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError(f"{name} did not start")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def s3_server() -> Iterator[str]:
    port = _free_port()
    argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    yield from _serve(argv, port, "/moto-api/", "moto server")


@pytest.fixture
def s3_env(s3_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The environment of a user of this server; returns a fresh bucket's URL (``s3://b``)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    import s3fs

    bucket = f"ddai-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(endpoint_url=s3_server, skip_instance_cache=True).mkdir(bucket)
    return f"s3://{bucket}"


# ---------------------------------------------------------------- object storage (GCS) tests
# A fake GCS server (tests/support/gcs_fake.py: GCS's JSON API with generation preconditions) on
# 127.0.0.1, one per test module; each test gets its own bucket and STORAGE_EMULATOR_HOST.


@pytest.fixture(scope="module")
def gcs_server() -> Iterator[str]:
    port = _free_port()
    fake = Path(__file__).parent / "support" / "gcs_fake.py"
    argv = [sys.executable, str(fake), "--port", str(port)]
    yield from _serve(argv, port, "/storage/v1/b", "fake GCS server")


@pytest.fixture
def gs_env(gcs_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The environment of a user of this server; returns a fresh bucket's URL (``gs://b``)."""
    import json

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server)
    bucket = f"ddai-{uuid.uuid4().hex[:12]}"
    req = urllib.request.Request(
        f"{gcs_server}/storage/v1/b?project=test",
        data=json.dumps({"name": bucket}).encode(),
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(req, timeout=10).close()
    return f"gs://{bucket}"


@pytest.fixture(params=["s3", "gs"])
def store_env(request: pytest.FixtureRequest) -> str:
    """A fresh bucket on each object store the tests cover: ``s3://b`` (moto), ``gs://b``."""
    return request.getfixturevalue(f"{request.param}_env")


# ---------------------------------------------------------------- fake model server (SDK tests)
# One fake OpenAI/Gemini server per test module (support/fakes.py), reset before each test: the
# backend tests point the real SDKs at ``srv``.


@pytest.fixture(scope="module")
def server():
    """A fake OpenAI/Gemini server for the test module (``retry-after: 0``)."""
    from support.fakes import FakeModelServer

    with FakeModelServer(retry_after_s=0.0) as srv:
        yield srv


@pytest.fixture
def srv(server):
    """The module's server with its counters cleared, no scripted faults and no latency."""
    server.reset()
    server.script = []
    server.latency_s = 0.0
    return server
