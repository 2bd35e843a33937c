"""sidecar_bench.transports: a run job on engines reached without SSH does not import the SDK's SSH transport."""

import subprocess
import sys

import pytest

from sidecar_bench.transports import needs_ssh
from workflow_helpers import ROOT


@pytest.mark.parametrize(
    "hosts, environ, expected",
    [
        ([{"name": "local", "url": None}], {}, False),
        ([{"name": "local", "url": None}], {"DOCKER_HOST": "unix:///var/run/docker.sock"}, False),
        ([{"name": "local", "url": None}], {"DOCKER_HOST": "ssh://root@box"}, True),
        ([{"name": "a", "url": "tcp://10.0.0.2:2376"}], {"DOCKER_HOST": "ssh://root@box"}, False),
        (
            [{"name": "a", "url": "tcp://10.0.0.2:2376"}, {"name": "b", "url": "ssh://u@h"}],
            {},
            True,
        ),
        ([], {}, False),
        ([], {"DOCKER_HOST": "ssh://root@box"}, True),
    ],
)
def test_ssh_is_needed_only_where_an_engine_is_reached_over_ssh(hosts, environ, expected):
    assert needs_ssh(hosts, environ) is expected


CHILD = """
import json, sys
from sidecar_bench.transports import skip_ssh_transport
skipped = skip_ssh_transport(json.loads(sys.argv[1]), {})
import docker
from sidecar_bench import containers, hosts, job  # what a run job imports
client = docker.DockerClient(base_url="unix:///var/run/docker.sock")
try:
    import paramiko  # noqa: F401
    blocked = False
except ImportError:
    blocked = True
print(json.dumps({"skipped": skipped, "blocked": blocked, "ssh_errors": len(containers.TRANSPORT_ERRORS)}))
"""


def _child(hosts: str) -> dict:
    import json

    out = subprocess.run(
        [sys.executable, "-c", CHILD, hosts],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT / "scripts"), "PATH": "/usr/bin:/bin"},
    )
    return json.loads(out.stdout)


def test_a_job_on_local_engines_imports_the_sdk_and_the_runner_without_paramiko_and_one_over_ssh_with_it():
    local = _child('[{"name": "local", "url": null}]')
    ssh = _child('[{"name": "box", "url": "ssh://root@box"}]')
    assert local["skipped"] and local["blocked"]
    assert not ssh["skipped"] and not ssh["blocked"]
    # Without paramiko the runner catches the engine's own transport errors only.
    assert local["ssh_errors"] == ssh["ssh_errors"] - 1
