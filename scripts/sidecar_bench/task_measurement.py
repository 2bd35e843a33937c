"""The task topology's run (taskcgroup.py says what it needs): TaskMeasurement, a Measurement whose task is a cgroup.

A helper makes the task cgroup with the quota and the memory limit; the app and each sidecar run in their own
containers under it with their roles' CPU shares, and a reader container reads every cgroup file of the run from
outside the task's CPU. runner.run_condition picks this class for a condition with topology task.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import docker.errors

from . import cgroup, knobs, taskcgroup
from . import proxy as proxymod
from .containers import (
    TASK_TMPFS,
    TRANSPORT_ERRORS,
    ExecResult,
    container_name,
    exec_in,
    hardening,
    labels,
    remove_container,
    watched,
)
from .failures import RunError, signal_name
from .labels import PART_LABEL, RUN_LABEL, TASK_CGROUP_LABEL
from .measurement import Measurement, task_environment

log = logging.getLogger(__name__)

# The sidecar program in the task images (task-image/sidecar): the task topology runs it as a container's command.
SIDECAR_SCRIPT = "/sidecar/sidecar.py"


class TaskMeasurement(Measurement):
    """The task topology (taskcgroup.py): a task cgroup with the quota and memory limit made by a helper, the app
    and each sidecar in its own container under it with its role's CPU shares, and a reader container that reads
    every cgroup file of the run from outside the task's CPU."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.info = self.client.info()
        self.version = knobs.cgroup_version(self.info)
        self.cgroup_name = taskcgroup.cgroup_name(self.run_id)
        self.reader: Any = None
        self.sidecars: dict[str, Any] = {}
        self.cgroup_made = False

    def _helper(self, part: str, command: list[str], read_only: bool) -> str:
        condition = self.condition
        try:
            output = self.client.containers.run(
                self.loadgen_image.id,
                entrypoint=["sh"],
                command=command,
                name=container_name(condition, self.run_id, part),
                labels=labels(condition, self.run_id, part),
                remove=True,
                stdout=True,
                stderr=True,
                **taskcgroup.mount_options(read_only),
            )
        except docker.errors.ContainerError as err:
            raise RunError(
                f"{condition.id}: the task cgroup's {part} helper failed: "
                f"{(err.stderr or b'').decode(errors='replace').strip()[:300]}"
            ) from err
        return output.decode(errors="replace")

    def start(self) -> None:
        condition, run_id = self.condition, self.run_id
        # The reader first: it carries the task cgroup's name, so the sweep finds the cgroup whatever happens next.
        self.reader = self._start_attached(
            self.loadgen_image.id,
            entrypoint=watched(self.task_deadline_s(), ["sleep", str(self.task_deadline_s())]),
            name=container_name(condition, run_id, "reader"),
            labels={**labels(condition, run_id, "reader"), TASK_CGROUP_LABEL: self.cgroup_name},
            **taskcgroup.mount_options(read_only=True),
        )
        self.cgroup_made = True
        found = taskcgroup.parse_setup(
            self._helper(
                "setup",
                taskcgroup.setup_command(self.info, self.cgroup_name, condition),
                read_only=False,
            )
        )
        try:
            taskcgroup.check_setup(condition, self.version, found)
        except knobs.KnobError as err:
            raise RunError(str(err)) from None
        log.info("made task cgroup %s: %s", self.cgroup_name, found)
        parent = {"cgroup_parent": "/" + self.cgroup_name}
        # The app's container starts no sidecar, so no proxy either (its entrypoint refuses one without them).
        app_env = {
            key: value
            for key, value in task_environment(condition, self.load.sidecar_burn).items()
            if key != "PROXY"
        }
        app_env["SIDECAR_COUNT"] = "0"
        self.task = self._start_attached(
            self.task_image.id,
            entrypoint=self.task_entrypoint(),
            name=container_name(condition, run_id, "task"),
            environment=app_env,
            labels=labels(condition, run_id, "task"),
            cpu_shares=condition.role_shares("app"),
            network_mode="none",
            **parent,
            **hardening(TASK_TMPFS),
        )
        log.info("started app container %s under %s", self.task.name, self.cgroup_name)
        for role in condition.roles:
            command = [
                "python3",
                SIDECAR_SCRIPT,
                "--role",
                role,
                "--load",
                f"{condition.sidecar_load_pct:g}",
                "--burn",
                self.load.sidecar_burn,
            ]
            tmpfs = TASK_TMPFS
            if role == "proxy" and condition.real_proxy:
                # A real proxy is its own container, in the app's network namespace, as Envoy is in ECS.
                command, tmpfs = (
                    proxymod.container_command(condition),
                    proxymod.task_tmpfs(condition, TASK_TMPFS),
                )
            self.sidecars[role] = self._start_attached(
                self.task_image.id,
                entrypoint=watched(self.task_deadline_s(), command),
                name=container_name(condition, run_id, role),
                labels=labels(condition, run_id, role),
                cpu_shares=condition.role_shares(role),
                network_mode=f"container:{self.task.id}",
                **parent,
                **hardening(tmpfs),
            )
        self.start_loadgen()
        log.info(
            "started %d sidecar container(s) and the load generator in the app's network namespace",
            len(self.sidecars),
        )

    def proxy_exec(self, script: str) -> ExecResult:
        return exec_in(self.client, self.sidecars["proxy"].id, ["sh", "-c", script])

    def containers_by_role(self) -> dict[str, str]:
        return {"app": self.task.id, **{role: c.id for role, c in self.sidecars.items()}}

    def snapshot(self, wait_roles: bool = False) -> tuple[cgroup.TaskSnapshot, float]:
        result = exec_in(
            self.client,
            self.reader.id,
            taskcgroup.read_command(self.info, self.cgroup_name, self.containers_by_role()),
        )
        taken = time.monotonic()
        self.task_reads.append("exec")  # the reader container's
        if result.exit_code != 0:
            raise RunError(
                f"{self.condition.id}: reading the task cgroup failed: {result.stderr[:300]}"
            )
        snap = cgroup.parse_snapshot(result.stdout)
        try:
            roles = taskcgroup.parse_roles("\n".join(snap.extra))
        except knobs.KnobError as err:
            raise RunError(f"{self.condition.id}: {err}; {result.stderr.strip()[:300]}") from None
        return dataclasses.replace(snap, roles={role: 0 for role in roles}), taken

    def role_cpu(self, before: cgroup.TaskSnapshot, after: cgroup.TaskSnapshot) -> dict[str, float]:
        """CPU seconds of each role over the window: each role's own container cgroup."""
        first = taskcgroup.parse_roles("\n".join(before.extra))
        last = taskcgroup.parse_roles("\n".join(after.extra))
        seconds = {}
        for role, (usage, _) in first.items():
            if role not in last or last[role][0] < usage:
                raise cgroup.SnapshotError(
                    f"role {role}: its container's CPU counter is gone or went backwards"
                )
            seconds[role] = (last[role][0] - usage) / 1e9
        return seconds

    def check_roles_alive(self) -> None:
        for role, container in self.sidecars.items():
            container.reload()
            if container.status != "running":
                state = container.attrs.get("State", {})
                status = state.get("ExitCode")
                died = {
                    "role": role,
                    "pid": None,
                    "exit_status": status,
                    "signal": signal_name(status - 128) if status and status > 128 else None,
                }
                raise self.start_error(
                    f"had its sidecar container {container.name} stop",
                    "window",
                    died=died,
                    oom_killed=bool(state.get("OOMKilled")),
                )

    def check_layout(self, snapshot: cgroup.TaskSnapshot) -> dict[str, Any]:
        """Fail unless every container is under the task cgroup with its role's weight; describe the layout."""
        condition = self.condition
        roles = taskcgroup.parse_roles("\n".join(snapshot.extra))
        containers = {"app": self.task, **self.sidecars}
        layout: dict[str, Any] = {
            "topology": "task",
            "task_cgroup": "/" + self.cgroup_name,
            "containers": {},
        }
        for role, container in containers.items():
            parent = (container.attrs.get("HostConfig") or {}).get("CgroupParent")
            if role not in roles or parent != "/" + self.cgroup_name:
                raise RunError(
                    f"{condition.id}: the {role} container's cgroup is not under the task cgroup "
                    f"/{self.cgroup_name} (its CgroupParent: {parent!r})"
                )
            expected = taskcgroup.expected_weight(condition, role, self.version)
            if roles[role][1] != expected:
                raise RunError(
                    f"{condition.id}: expected the {role} container's CPU "
                    f"{'shares' if self.version == 1 else 'weight'} {expected}, its cgroup has "
                    f"{roles[role][1]}"
                )
            layout["containers"][role] = {"id": container.id, "weight": roles[role][1]}
        return layout

    def remove(self) -> None:
        """Every container of the run, then the task cgroup; the reader (the sweep's mark of the cgroup) last,
        and only once the cgroup is gone."""
        found = {
            c.id: c for c in (self.loadgen, self.task, *self.sidecars.values()) if c is not None
        }
        try:
            for container in self.client.containers.list(
                all=True, filters={"label": f"{RUN_LABEL}={self.run_id}"}
            ):
                found.setdefault(container.id, container)
        except TRANSPORT_ERRORS as err:
            log.warning("listing containers of run %s failed: %s", self.run_id, err)
        readers = [
            c
            for c in found.values()
            if (getattr(c, "labels", None) or {}).get(PART_LABEL) == "reader"
        ]
        if self.reader is not None and self.reader.id not in {c.id for c in readers}:
            readers.append(self.reader)
        others = [c for c in found.values() if c not in readers]
        with ThreadPoolExecutor(max_workers=max(1, len(others))) as pool:
            list(pool.map(remove_container, others))
        if not self.cgroup_made or taskcgroup.remove_cgroups(
            self.client, self.loadgen_image.id, [self.cgroup_name]
        ):
            for reader in readers:
                remove_container(reader)
        # After the removal (a closed stdin ends a container too; a reader kept for the sweep just stops).
        self._close_stdins()
