"""A workflow's hold on its engines: their leases taken once, at its start, for all its jobs.

Every job that measures or builds holds its engine's lease (hosts.host_lock, lease.py). Taken by
each job, the lease is a container created, attached, started and removed for every run: 0.4 s
of a run's 1.7 s of harness on a 2-core VM. A workflow that runs its jobs on this machine takes
each configured engine's lease once instead (Snakemake's onstart, workflow/rules/common.smk),
in its own process, and names the leases in the environment its jobs inherit
(lease.WORKFLOW_ENV). A job whose engine's lease still carries that name works under it
(lease.borrow); any other job takes a lease of its own, as before.

What the lease promises is unchanged: nobody else measures or builds on the engine (or on
another engine of its machine) while a job of the workflow runs, and the stale-container sweep
runs under it. Its life is the workflow process's: onsuccess and onerror give it back, and the
process's end, even by kill -9, closes its attach and ends it within seconds (lease.py). Between
two of the workflow's runs the engine is no longer free for others: a second workflow waits for
the first to end instead of slipping its runs in between, so one matrix is measured without
anything of another in it.

Not on a cluster (each job's engine is its node's), not for an engine whose lease is busy
when the workflow starts (another workflow measures), and not when two configured engines share
a machine (a job bound to one, an image build, could never take its lease while the workflow
held the other's): their jobs take their own, waiting as before.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Mapping

from . import hosts as hostmod
from . import lease

log = logging.getLogger(__name__)

# A workflow that runs longer than this (a full `article` set takes 5 h 20 min on a 2-core VM)
# loses the hold at that point; its later jobs take their own leases.
WORKFLOW_MAX_HOLD_S = 24 * 3600
# Rules whose jobs take an engine; a checkpoint may add such jobs after the start.
ENGINE_RULES = frozenset({"run_condition", "run_calibration", "build_image"})

_held: list[Any] = []


def needs_engine(rule_names: list[str], checkpoints: bool) -> bool:
    """Whether a workflow whose pending jobs have these rules should hold its engines."""
    return checkpoints or any(name in ENGINE_RULES for name in rule_names)


def hold(hosts: list[Mapping[str, Any]], describe: str, timeout: float = 60) -> list[str]:
    """Take every reachable, free engine's lease for this process's jobs; one line per engine, to show.

    Sets lease.WORKFLOW_ENV ({engine id: lease id}) in os.environ, which the jobs inherit."""
    names: dict[str, str] = lease.workflow_leases()
    lines = []
    for host in hosts:
        try:
            client = hostmod.client_for(host, timeout)
            try:
                engine_id = client.info()["ID"]
            finally:
                client.close()
        except hostmod.UNREACHABLE as err:
            lines.append(f"engine {host['name']} does not answer now ({err}): its jobs will say so")
            continue
        if engine_id in names:
            continue  # two names of one engine
        try:
            held = hostmod._take_lease(host, timeout, describe, WORKFLOW_MAX_HOLD_S)
        except lease.LeaseBusy as err:
            if f"({describe})" in str(err):
                # Another engine of this machine, whose lease this workflow holds: a job bound to
                # this engine (an image build) could never take it while the workflow holds the
                # other. Hold none; each job takes its own, one engine of the machine at a time.
                release()
                return [
                    f"engine {host['name']} shares its machine with another engine of this "
                    "workflow: each job takes its own lease"
                ]
            lines.append(
                f"engine {host['name']} is busy ({err}): each job waits for it and takes its lease"
            )
            continue
        except hostmod.UNREACHABLE as err:  # an engine failing now: each job meets it on its own
            lines.append(
                f"engine {host['name']}: no lease for the workflow ({err}): each job takes its own"
            )
            continue
        if held is None:
            continue  # no image to run a lease in yet: the jobs take their own once one exists
        _held.append(held)
        names[engine_id] = held.lease_id
        lines.append(f"holding engine {host['name']}'s lease for this workflow's jobs")
    os.environ[lease.WORKFLOW_ENV] = json.dumps(names)
    return lines


def release() -> None:
    """Give back what hold() took (the process's end would too, within seconds)."""
    os.environ.pop(lease.WORKFLOW_ENV, None)
    while _held:
        _held.pop().release()
