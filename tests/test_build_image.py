"""The build_image job: it takes the engine's lease itself, so this module holds none.

(tests/test_image.py holds the lease for the whole module while it builds and starts
containers; a job taking the same engine's lease from inside it would wait for ever.)
"""

import json
import logging
import os
import time

import docker
import pytest

from sidecar_bench import image


@pytest.mark.docker
@pytest.mark.slow
def test_build_image_script_writes_the_ref_for_every_host(tmp_path):
    import build_image

    ref = tmp_path / "images" / "go-sidecar.json"
    build_image.main(
        variant="go-sidecar",
        hosts=[{"name": "local", "url": None}],
        base_image="debian:bookworm-slim",
        base_fallback="debootstrap",
        ref_path=ref,
        locks=tmp_path / "locks",
    )
    client = docker.from_env()
    base = image.ensure_base(
        client, "debian:bookworm-slim", "debootstrap"
    )  # present: nothing is built
    data = json.loads(ref.read_text())
    assert data["tag"] == "sidecar-bench/task:go-sidecar"
    assert data["hosts"] == {"local": client.images.get(image.image_tag("go-sidecar")).id}
    assert data["base_image"] == base
    assert data["inputs_digest"] == image.inputs_digest("go-sidecar", base)
    assert set(data["versions"]) == {"go", "python"}


@pytest.mark.docker
def test_an_image_build_holds_the_engines_lease_and_waits_for_its_holder(tmp_path, caplog):
    """A build takes the engine's lease like a run: it waits while another workflow holds the engine, so that
    no build runs beside a measurement, and holds the lease itself while it builds (or keeps) the image."""
    import build_image
    from test_lease import start_holder

    from sidecar_bench import hosts, lease

    client = docker.from_env()
    held = []
    ensure_variant = image.ensure_variant

    def watched(engine, variant, *args, **kwargs):  # who holds the lease while the image is made
        held.append(lease.current(engine).labels)
        return ensure_variant(engine, variant, *args, **kwargs)

    holder = start_holder(tmp_path, "matrix", hold=3)
    try:
        started = time.monotonic()
        with (
            caplog.at_level(logging.INFO, logger=hosts.log.name),
            pytest.MonkeyPatch.context() as patch,
        ):
            patch.setattr(image, "ensure_variant", watched)
            build_image.main(
                variant="loadgen",
                hosts=[{"name": "local", "url": None}],
                base_image="debian:bookworm-slim",
                base_fallback="debootstrap",
                ref_path=tmp_path / "loadgen.json",
                locks=tmp_path / "locks",
            )
        waited = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait()
        client.close()
    assert waited >= 1.5, waited
    waits = [r.getMessage() for r in caplog.records if "waiting for engine local" in r.getMessage()]
    assert waits and f"pid {holder.pid}" in waits[0] and "(matrix)" in waits[0], waits
    assert len(held) == 1 and held[0][lease.LABEL_PREFIX + "pid"] == str(os.getpid())
    assert "build loadgen" in lease.describe_labels(held[0])
