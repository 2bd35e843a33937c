#!/usr/bin/env python3
"""Remove what a killed workflow left on its Docker engines, safely.

    .venv/bin/python scripts/cleanup.py              # every host of config.yaml
    .venv/bin/python scripts/cleanup.py --status     # only say who holds each engine and what is left
    .venv/bin/python scripts/cleanup.py --no-wait    # do not wait for a busy engine: say who holds it
    .venv/bin/python scripts/cleanup.py --host lab1 --config other.yaml

For each engine it takes the engine's lease like a run does (waiting while another
workflow measures there, breaking a stale lease of a dead holder), then removes every
container of ours (label org.sidecar-bench.project=sidecar-bench): while it holds the
lease no workflow measures there, so they are leftovers. The containers of a workflow
that still holds its lease are never touched. Each run does the same sweep before it measures, so the next invocation of the
workflow also cleans up; this command is for when no run follows soon (a killed workflow's
sidecars burn CPU until their container's deadline).

Exit status: 0 when every engine was cleaned (or, with --status, answered), 1 otherwise.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import yaml

from sidecar_bench import lease
from sidecar_bench.hosts import UNREACHABLE, HostError, client_for, host_lock, lock_dir
from sidecar_bench.job import remove_stale_containers
from sidecar_bench.labels import CONDITION_LABEL, LEASE_LABEL, PROJECT, PROJECT_LABEL


def hosts_of(config_path: Path, names: list[str] | None) -> list[dict]:
    config = yaml.safe_load(config_path.read_text()) if config_path.exists() else {}
    hosts = (config or {}).get("hosts") or [{"name": "local", "url": None}]
    if names:
        unknown = sorted(set(names) - {h["name"] for h in hosts})
        if unknown:
            raise SystemExit(f"cleanup: no host named {', '.join(unknown)} in {config_path}")
        hosts = [h for h in hosts if h["name"] in names]
    return hosts


def status(host: dict) -> bool:
    try:
        client = client_for(host, 30)
        print(f"{host['name']}: lease {lease.status(client)}")
        for container in client.containers.list(
            all=True, filters={"label": f"{PROJECT_LABEL}={PROJECT}"}
        ):
            if LEASE_LABEL in (container.labels or {}):
                continue
            print(
                f"{host['name']}:   container {container.name} ({container.status}, "
                f"{container.labels.get(CONDITION_LABEL, '?')}, created {container.attrs.get('Created', '?')[:19]})"
            )
        client.close()
        return True
    except UNREACHABLE as err:
        print(f"{host['name']}: not reachable: {err}", file=sys.stderr)
        return False


def clean(host: dict, wait: bool) -> bool:
    try:
        with host_lock([host], lock_dir(), 60, "cleanup", wait=wait) as (_, client):
            removed = remove_stale_containers(client)
    except HostError as err:
        print(f"{host['name']}: {err}", file=sys.stderr)
        return False
    print(
        f"{host['name']}: removed {len(removed)} container(s)"
        + (f": {', '.join(removed)}" if removed else "")
    )
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--config", type=Path, default=Path("config.yaml"), help="config.yaml with the hosts"
    )
    parser.add_argument("--host", action="append", help="only this host (repeatable)")
    parser.add_argument(
        "--status", action="store_true", help="only show leases and containers, remove nothing"
    )
    parser.add_argument(
        "--no-wait", action="store_true", help="skip a busy engine instead of waiting for it"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="%(levelname)s %(message)s"
    )
    ok = True
    for host in hosts_of(args.config, args.host):
        ok &= status(host) if args.status else clean(host, wait=not args.no_wait)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
