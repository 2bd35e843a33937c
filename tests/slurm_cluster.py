"""A one-node SLURM cluster on this machine: munged, slurmctld and slurmd started directly
(no systemd), this machine the only node, every file (munge key, slurm.conf, state, spool,
logs, pid files, the job completion records) under one temporary directory.

The tests start one with `SlurmCluster(...).start()` and stop it in a finalizer; by hand:

    .venv/bin/python tests/slurm_cluster.py          # start one, print its SLURM_CONF, stop on Enter

Clients (sbatch, squeue, scancel, and Snakemake's SLURM executor, which calls them) find it
through SLURM_CONF=<dir>/slurm.conf; nothing of the machine's own SLURM or munge set-up
(/etc/slurm, /etc/munge, /run/munge) is read or changed.

There is no accounting database (slurmdbd), so `sacct` answers "accounting storage is
disabled": job states come from `squeue` (finished jobs stay listed for MinJobAge seconds)
and SLURM's own record of every finished job is the job completion log
(JobCompType=jobcomp/filetxt), one line per job with its state, node, allocated CPUs and
start and end times, read by `SlurmCluster.finished_jobs()`.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

PACKAGES = ("munge", "slurmctld", "slurmd", "slurm-client")
PROGRAMS = {
    "munged": "munge",
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "sbatch": "slurm-client",
    "squeue": "slurm-client",
    "scancel": "slurm-client",
}
PARTITION = "bench"
# A job asked to stop gets SIGTERM, then SIGKILL this many seconds later: the runner
# removes its containers on SIGTERM well within it.
KILL_WAIT_S = 30


def missing_programs() -> list[str]:
    return [
        name
        for name in PROGRAMS
        if shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None
    ]


def install_reason() -> str | None:
    """None when SLURM and munge are installed (installing them with apt-get where missing
    and possible); otherwise why they cannot be."""
    missing = missing_programs()
    if not missing:
        return None
    packages = sorted({PROGRAMS[name] for name in missing})
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return (
            f"SLURM is not installed ({', '.join(missing)} missing) and apt-get cannot install it here "
            f"(needs root on Debian/Ubuntu): apt-get install {' '.join(PACKAGES)}"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], env=env, check=True, capture_output=True)
    done = subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0 or missing_programs():
        raise RuntimeError(
            f"apt-get install {' '.join(packages)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    return None


def program(name: str) -> str:
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") or name


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def node_memory_mb() -> int:
    """A little below what slurmd sees, so that the node never registers with less than configured."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(int(line.split()[1]) / 1024 * 0.9)
    return 1024


@dataclass
class FinishedJob:
    """One line of SLURM's job completion log."""

    job_id: str
    state: str
    node_list: str
    cpus: int
    start: str
    end: str
    fields: dict = field(repr=False, default_factory=dict)

    @property
    def start_s(self) -> float:
        return time.mktime(time.strptime(self.start, "%Y-%m-%dT%H:%M:%S"))

    @property
    def end_s(self) -> float:
        return time.mktime(time.strptime(self.end, "%Y-%m-%dT%H:%M:%S"))


class SlurmCluster:
    """munged + slurmctld + slurmd for one node (this machine), all state under `base`."""

    def __init__(self, base: Path | None = None):
        # munged insists on a socket directory every user can traverse: pytest's own
        # temporary directories are private, so the cluster gets one of its own.
        self.base = Path(base or tempfile.mkdtemp(prefix="sidecar-bench-slurm-"))
        self.base.mkdir(parents=True, exist_ok=True)
        self.base.chmod(0o755)
        self.node = socket.gethostname().split(".")[0]
        self.cpus = os.cpu_count() or 1
        self.conf = self.base / "slurm.conf"
        self.jobcomp = self.base / "jobcomp.txt"
        # The executor's job step runs `srun` with every SLURM_* variable but the job's
        # identity removed, SLURM_CONF too; a real cluster's srun finds /etc/slurm/slurm.conf,
        # this one's finds its slurm.conf through this wrapper, first on the jobs' PATH.
        self.bin = self.base / "bin"
        self.env = {
            **os.environ,
            "SLURM_CONF": str(self.conf),
            "PATH": f"{self.bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        }
        self.processes: dict[str, subprocess.Popen] = {}

    # -- start and stop -------------------------------------------------------------------

    def start(self, timeout: float = 60) -> "SlurmCluster":
        try:
            self._start_munged()
            self._write_conf()
            self._start("slurmctld", [program("slurmctld"), "-D", "-f", str(self.conf)])
            self._start("slurmd", [program("slurmd"), "-D", "-f", str(self.conf), "-N", self.node])
            self._wait_idle(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, name: str, argv: list[str]) -> None:
        out = open(self.base / "log" / f"{name}.out", "w")
        # A session of their own: a Ctrl-C meant for the tests does not reach the daemons
        # before the finalizer has cancelled the jobs.
        self.processes[name] = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
        )
        out.close()

    def _start_munged(self) -> None:
        (self.base / "log").mkdir(exist_ok=True)
        keys = self.base / "munge-key"
        keys.mkdir(mode=0o700, exist_ok=True)
        key = keys / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        run = self.base / "munge"
        run.mkdir(exist_ok=True)
        run.chmod(0o755)
        self.munge_socket = run / "munge.socket"
        self._start(
            "munged",
            [
                program("munged"),
                "--foreground",
                f"--key-file={key}",
                f"--socket={self.munge_socket}",
                f"--pid-file={run / 'munged.pid'}",
                f"--log-file={self.base / 'log' / 'munged.log'}",
                f"--seed-file={run / 'munged.seed'}",
            ],
        )
        deadline = time.monotonic() + 20
        while not self.munge_socket.exists():
            if self.processes["munged"].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"munged did not start:\n{self.log('munged.out')}")
            time.sleep(0.05)

    def _write_conf(self) -> None:
        self.bin.mkdir(exist_ok=True)
        srun = self.bin / "srun"
        srun.write_text(f'#!/bin/sh\nSLURM_CONF={self.conf} exec {program("srun")} "$@"\n')
        srun.chmod(0o755)
        for name in ("state", "spool"):
            (self.base / name).mkdir(exist_ok=True)
        log = self.base / "log"
        self.conf.write_text(f"""\
# A one-node cluster for sidecar-bench's tests; every path is under {self.base}.
ClusterName=sidecarbench
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
StateSaveLocation={self.base / "state"}
SlurmdSpoolDir={self.base / "spool"}
SlurmctldPidFile={self.base / "slurmctld.pid"}
SlurmdPidFile={self.base / "slurmd.pid"}
SlurmctldLogFile={log / "slurmctld.log"}
SlurmdLogFile={log / "slurmd.log"}
# No cgroup plugins: they need a delegated cgroup tree that a container or VM may not give.
# The measured containers run under dockerd, outside any job's cgroup, either way.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
# No slurmdbd: jobs are listed by squeue for MinJobAge seconds after they end, and every
# finished job is written to the job completion log.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={self.jobcomp}
MinJobAge=300
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
KillWait={KILL_WAIT_S}
ReturnToService=2
MailProg=/bin/true
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={node_memory_mb()} State=UNKNOWN
PartitionName={PARTITION} Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
""")

    def _wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            for name, proc in self.processes.items():
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited ({proc.returncode}):\n{self.log(name + '.out')}"
                    )
            done = self.client("sinfo", "--noheader", "--format=%t", check=False)
            state = done.stdout.strip()
            if state == "idle":
                return
            time.sleep(0.2)
        raise RuntimeError(
            f"the node is not idle after {timeout} s (sinfo: {state!r}):\n"
            f"{self.log('slurmctld.log')[-3000:]}\n{self.log('slurmd.log')[-3000:]}"
        )

    def stop(self, timeout: float = KILL_WAIT_S + 30) -> None:
        """Cancel every job still queued or running, wait until they are gone, stop the daemons."""
        if "slurmctld" in self.processes and self.processes["slurmctld"].poll() is None:
            ids = self.queued_job_ids()
            if ids:
                self.client("scancel", *ids, check=False)
                deadline = time.monotonic() + timeout
                while self.queued_job_ids(active_only=True) and time.monotonic() < deadline:
                    time.sleep(0.5)
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.processes.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def remove(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)

    # -- clients and records --------------------------------------------------------------

    def client(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            [program(argv[0]), *argv[1:]],
            env=self.env,
            capture_output=True,
            text=True,
            check=check,
            timeout=60,
        )

    def queued_job_ids(self, active_only: bool = False) -> list[str]:
        states = (
            "PENDING,RUNNING,SUSPENDED,COMPLETING,CONFIGURING"
            if active_only
            else "PENDING,RUNNING,SUSPENDED,CONFIGURING"
        )
        done = self.client("squeue", "--noheader", "--format=%i", f"--states={states}", check=False)
        return done.stdout.split() if done.returncode == 0 else []

    def job_states(self) -> dict[str, str]:
        """{job id: state} of every job slurmctld still knows (queued, running, or ended less than MinJobAge ago)."""
        done = self.client("squeue", "--noheader", "--format=%i|%T", "--states=all")
        return dict(line.split("|", 1) for line in done.stdout.split())

    def finished_jobs(self) -> dict[str, FinishedJob]:
        """SLURM's job completion log: one record per job that ended (completed, failed, cancelled)."""
        jobs = {}
        if not self.jobcomp.exists():
            return jobs
        for line in self.jobcomp.read_text().splitlines():
            fields = dict(re.findall(r"(\w+)=(\S*)", line))
            if "JobId" not in fields:
                continue
            jobs[fields["JobId"]] = FinishedJob(
                job_id=fields["JobId"],
                state=fields["JobState"],
                node_list=fields["NodeList"],
                cpus=int(fields.get("ProcCnt") or 0),
                start=fields["StartTime"],
                end=fields["EndTime"],
                fields=fields,
            )
        return jobs

    def log(self, name: str) -> str:
        path = self.base / "log" / name
        return path.read_text(errors="replace") if path.exists() else f"({path} is missing)"


if __name__ == "__main__":
    reason = install_reason()
    if reason:
        sys.exit(reason)
    cluster = SlurmCluster().start()
    print(f"export SLURM_CONF={cluster.conf}")
    try:
        input("A one-node SLURM cluster is running; Enter stops it. ")
    finally:
        cluster.stop()
        cluster.remove()
