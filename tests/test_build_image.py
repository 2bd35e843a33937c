"""The build_image job: it takes the engine's lease itself, so this module holds none.

(tests/test_image.py holds the lease for the whole module while it builds and starts
containers; a job taking the same engine's lease from inside it would wait for ever.)
"""

import json

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
    base = image.ensure_base(client, "debian:bookworm-slim", "debootstrap")  # present: nothing is built
    data = json.loads(ref.read_text())
    assert data["tag"] == "sidecar-bench/task:go-sidecar"
    assert data["hosts"] == {"local": client.images.get(image.image_tag("go-sidecar")).id}
    assert data["base_image"] == base
    assert data["inputs_digest"] == image.inputs_digest("go-sidecar", base)
    assert set(data["versions"]) == {"go", "python"}
