"""What the engine applied, checked against the condition: a run is kept only when its task had the limits,
knobs and runtime settings the condition names, and a condition the host cannot give is refused before
anything is created on it.
"""

from __future__ import annotations

from typing import Any, Mapping

from . import cgroup, knobs
from .conditions import Condition
from .failures import RunError

# How far the cgroup's quota / period may be from the condition's vCPU.
VCPU_TOLERANCE = 1e-3


def check_host_capacity(
    info: Mapping[str, Any], condition: Condition, host_name: str, address: str
) -> None:
    """Refuse a condition the engine cannot give (client.info()): more CPUs or memory than it has.

    Checked before anything is created on the engine, so the error names the host rather
    than being the engine's own "Range of CPUs is from 0.01 to N" at container creation.
    """
    cpus = info.get("NCPU")
    if cpus and condition.vcpu > cpus:
        raise RunError(
            f"{condition.id}: vcpu {condition.vcpu:g} is above the {cpus} CPUs of host {host_name!r} "
            f"({address}); lower vcpu in config.yaml or measure on a larger host"
        )
    memory = info.get("MemTotal")
    if memory and condition.memory_mb * 2**20 > memory:
        raise RunError(
            f"{condition.id}: memory_mb {condition.memory_mb} is above the {memory // 2**20} MiB of host "
            f"{host_name!r} ({address}); lower memory_mb in config.yaml or measure on a larger host"
        )


def check_limits(condition: Condition, limits: cgroup.Limits | None, nr_periods: int) -> None:
    """Fail unless the task's cgroup holds the condition's limits and its own CPU accounting.

    The limits are read back from the cgroup, not taken from what was asked of
    Docker: the vCPU, the memory limit, and no swap (a swap limit of 0; swap not
    accounted is refused too, since nothing then stops the task from swapping);
    nr_periods must grow over a loaded window: on a cgroup v2 host without a
    delegated cpu controller the counters would not be the task's.
    The knobs (period, burst, no quota and its shares, cpuset) are checked the same way.
    """
    if condition.knobs:
        check_knob_limits(condition, limits)
    if not condition.cpu_quota:
        check_memory(condition, limits)
        return
    if limits is None or limits.vcpu is None:
        found = (
            "no cgroup limit files"
            if limits is None
            else (f"cpu quota {limits.cpu_quota_us} / period {limits.cpu_period_us} us")
        )
        raise RunError(
            f"{condition.id}: expected a CPU limit of {condition.vcpu:g} vCPU on the task's cgroup, "
            f"found {found}"
        )
    if abs(limits.vcpu - condition.vcpu) > VCPU_TOLERANCE:
        raise RunError(
            f"{condition.id}: expected a CPU limit of {condition.vcpu:g} vCPU, the task's cgroup has "
            f"quota {limits.cpu_quota_us} / period {limits.cpu_period_us} us = {limits.vcpu:g} vCPU"
        )
    check_memory(condition, limits)
    if nr_periods <= 0:
        raise RunError(
            f"{condition.id}: the task cgroup's nr_periods did not increase over the window "
            f"(delta {nr_periods}): its CPU counters are not the task's own (cgroup v2 without "
            "the cpu controller delegated to containers?); enable it and rerun"
        )


def check_memory(condition: Condition, limits: cgroup.Limits | None) -> None:
    """Fail unless the task's cgroup holds the condition's memory limit and no swap."""
    expected_memory = condition.memory_mb * 2**20
    memory = None if limits is None else limits.memory_limit_bytes
    if memory != expected_memory:
        found = {None: "no memory limit file", -1: "no memory limit"}.get(memory, f"{memory} bytes")
        raise RunError(
            f"{condition.id}: expected a memory limit of {condition.memory_mb} MiB ({expected_memory} "
            f"bytes), the task's cgroup has {found}"
        )
    swap = limits.swap_limit_bytes
    if swap != 0:
        if swap is None:
            found = (
                "does not account swap (no memory.memsw.limit_in_bytes or memory.swap.max): the kernel "
                "cannot hold the task to no swap; enable swap accounting on the host (cgroup v1: boot with "
                "swapaccount=1) and rerun"
            )
        elif swap < 0:
            found = (
                "allows unlimited swap (the engine stores this too when the kernel cannot limit swap: "
                '`docker info` then warns "No swap limit support")'
            )
        else:
            found = f"allows {swap} bytes ({swap / 2**20:g} MiB) of swap"
        raise RunError(
            f"{condition.id}: expected no swap (memory + swap limited to the memory limit, "
            f"{expected_memory} bytes), the task's cgroup {found}"
        )


def check_knob_limits(condition: Condition, limits: cgroup.Limits | None) -> None:
    """Fail unless the task's cgroup holds the knobs' settings: quota and period, burst, shares, cpuset."""
    if limits is None:
        raise RunError(
            f"{condition.id}: no cgroup limit files to check {condition.knobs_text} against"
        )
    found = (limits.cpu_quota_us, limits.cpu_period_us)
    if found != (condition.quota_us, condition.period_us):
        raise RunError(
            f"{condition.id}: expected CPU quota {condition.quota_us} / period {condition.period_us} us "
            f"({condition.knobs_text}), the task's cgroup has quota {found[0]} / period {found[1]} us"
        )
    if condition.cpu_burst_pct is not None and limits.cpu_burst_us != condition.burst_us:
        raise RunError(
            f"{condition.id}: expected a CFS burst of {condition.burst_us} us, the task's cgroup has "
            f"{limits.cpu_burst_us}"
        )
    if condition.cpu_shares is not None:
        if limits.cpu_shares is not None and limits.cpu_shares != condition.cpu_shares:
            raise RunError(
                f"{condition.id}: expected {condition.cpu_shares} CPU shares, the task's cgroup has "
                f"{limits.cpu_shares}"
            )
        if limits.cpu_shares is None and limits.cpu_weight is None:
            raise RunError(
                f"{condition.id}: the task's cgroup shows neither cpu.shares nor cpu.weight"
            )
    if condition.cpuset is not None:
        found_cpus = None if limits.cpuset_cpus is None else knob_cpus(limits.cpuset_cpus)
        if found_cpus != knob_cpus(condition.cpuset):
            raise RunError(
                f"{condition.id}: expected cpuset {condition.cpuset}, the task's cgroup has "
                f"{limits.cpuset_cpus}"
            )


def knob_cpus(text: str) -> list[int]:
    from .conditions import cpuset_cpus

    return cpuset_cpus(text)


def check_app_environment(condition: Condition, found: Mapping[str, str]) -> None:
    """Fail unless the app process runs with the runtime settings the condition asks for (and no other)."""
    expected = knobs.runtime_environment(condition)
    for name in ("GOMAXPROCS", "UV_THREADPOOL_SIZE", "NODE_OPTIONS"):
        if found.get(name) != expected.get(name):
            raise RunError(
                f"{condition.id}: expected the app to run with {name}={expected.get(name, '(unset)')}, "
                f"its environment has {found.get(name, '(unset)')}"
            )
