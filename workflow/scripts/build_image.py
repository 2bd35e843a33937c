"""Snakemake script of rule build_image: make one image variant present on every Docker host.

Builds (or keeps, when its inputs-digest label is current) ``sidecar-bench/task:<variant>``
or, for variant "loadgen", ``sidecar-bench/loadgen:latest`` on each host of config.yaml's
``hosts``, holding each engine's lock so that no build runs beside a measurement, then
writes ``output.ref``: JSON {"variant", "tag", "inputs_digest", "base_image",
"hosts": {name: image_id}, "versions": {...}}.
"""

import logging
import sys
from pathlib import Path

from sidecar_bench import image
from sidecar_bench.hosts import HostError, host_lock, lock_dir

# Generous: a cold build of a Next.js variant downloads Debian packages.
BUILD_TIMEOUT_S = 1800


def main(
    variant,
    hosts,
    base_image,
    base_fallback,
    ref_path,
    next_build_dir=None,
    debian_mirror=None,
    locks=None,
    root=None,
):
    """Build (or keep) the variant's image on every host and write its ref; root: the task-image folder
    (default: the one beside the installed package), next_build_dir: where the Next.js app is built."""
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s"
    )
    if not hosts:
        raise image.ImageError(
            "build_image: config.yaml hosts is empty; list at least one Docker host"
        )
    image_ids, used_bases, versions = {}, set(), {}
    for host in hosts:
        name, url = host["name"], host.get("url")
        logging.info(
            "host %s (%s): ensuring %s", name, url or "default engine", image.image_tag(variant)
        )
        try:
            with host_lock([host], locks or lock_dir(), BUILD_TIMEOUT_S, f"build {variant}") as (
                _,
                client,
            ):
                base = image.ensure_base(
                    client, base_image, base_fallback, mirror=debian_mirror or image.DEBIAN_MIRROR
                )
                used_bases.add(base)
                image_ids[name] = image.ensure_variant(
                    client, variant, base, root=root, next_build_dir=next_build_dir
                )
                host_versions = image.image_versions(client, image_ids[name])
        except (image.ImageError, HostError) as exc:
            raise image.ImageError(f"host {name} ({url or 'default engine'}): {exc}") from exc
        if versions and host_versions != versions:
            logging.warning("host %s has versions %s, others %s", name, host_versions, versions)
        versions = versions or host_versions
    if len(used_bases) != 1:
        # Different bases give different digests, so runs on those hosts would not compare.
        raise image.ImageError(
            f"build_image {variant}: hosts ended up on different base images: {sorted(used_bases)}"
        )
    ref = image.describe(variant, used_bases.pop(), image_ids, versions, root=root)
    image.write_json_atomic(Path(ref_path), ref)
    logging.info("wrote %s", ref_path)


if __name__ == "__main__":
    # `snakemake` is injected by Snakemake's script: directive.
    sys.stderr = open(snakemake.log[0], "w")
    settings = snakemake.config["image"]
    # The workflow's own task-image folder and build folder (a copy of the project builds its copy).
    project = Path(snakemake.scriptdir).resolve().parents[1]  # the project: workflow/scripts/../..
    main(
        variant=snakemake.wildcards.variant,
        # From the config, not params: only the digest param may trigger a rebuild, so
        # adding a host or changing the fallback never reruns measured conditions.
        hosts=snakemake.config["hosts"],
        base_image=snakemake.params.base_image,
        base_fallback=settings["base_fallback"],
        ref_path=snakemake.output.ref,
        debian_mirror=settings["debian_mirror"],
        root=project / "task-image",
        next_build_dir=project / "results" / "build" / "next",
    )
