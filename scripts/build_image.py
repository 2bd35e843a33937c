"""Snakemake script of rule build_image: ensure one image variant on every Docker host.

Builds (or keeps, when its inputs-digest label is current) ``sidecar-bench/task:<variant>``
or, for variant "loadgen", ``sidecar-bench/loadgen:latest`` on each host in
``params.hosts`` (a list of {"name": ..., "url": ...}; url None = the environment's
default engine), then writes ``output.ref``: JSON {"variant", "tag", "inputs_digest",
"base_image", "hosts": {name: image_id}, "versions": {...}}.

Expected rule shape (params as plain values, so Snakemake notices a change):
    params: variant=..., hosts=[{"name": "local", "url": None}],
            base_image="debian:bookworm-slim", base_fallback="debootstrap"
    output: ref="results/images/{variant}.json"
    log: "results/logs/build_image/{variant}.log"
"""

import logging
import sys
from pathlib import Path

from sidecar_bench import image
from sidecar_bench.hosts import client_for


def main(variant, hosts, base_image, base_fallback, ref_path, next_build_dir=None, debian_mirror=None):
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if not hosts:
        raise image.ImageError("build_image: params.hosts is empty; list at least one Docker host")
    image_ids, used_bases, versions = {}, set(), {}
    for host in hosts:
        name, url = host["name"], host.get("url")
        logging.info("host %s (%s): ensuring %s", name, url or "default engine", image.image_tag(variant))
        client = client_for(host)
        try:
            base = image.ensure_base(client, base_image, base_fallback, mirror=debian_mirror or image.DEBIAN_MIRROR)
            used_bases.add(base)
            image_ids[name] = image.ensure_variant(client, variant, base, next_build_dir=next_build_dir)
            host_versions = image.image_versions(client, image_ids[name])
        except image.ImageError as exc:
            raise image.ImageError(f"host {name} ({url or 'default engine'}): {exc}") from exc
        finally:
            client.close()
        if versions and host_versions != versions:
            logging.warning("host %s has versions %s, others %s", name, host_versions, versions)
        versions = versions or host_versions
    if len(used_bases) != 1:
        # Different bases give different digests, so runs on those hosts would not compare.
        raise image.ImageError(f"build_image {variant}: hosts ended up on different base images: {sorted(used_bases)}")
    ref = image.describe(variant, used_bases.pop(), image_ids, versions)
    image.write_json_atomic(Path(ref_path), ref)
    logging.info("wrote %s", ref_path)


if __name__ == "__main__":
    # `snakemake` is injected by Snakemake's script: directive.
    sys.stderr = open(snakemake.log[0], "w")
    main(
        variant=snakemake.params.get("variant") or snakemake.wildcards.get("variant"),
        # From the config, not params: adding a host must not rebuild (and rerun) everything.
        hosts=snakemake.config["hosts"],
        base_image=snakemake.params.get("base_image") or "debian:bookworm-slim",
        base_fallback=snakemake.params.get("base_fallback", "debootstrap"),
        ref_path=snakemake.output.ref,
        next_build_dir=snakemake.params.get("next_build_dir"),
        debian_mirror=snakemake.params.get("debian_mirror"),
    )
