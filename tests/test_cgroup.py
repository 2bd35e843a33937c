"""cgroup snapshots -> counters and per-role CPU, from a real cgroup v1 task, hand-written v2 samples and a real v2
hierarchy mounted in a private namespace."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sidecar_bench import cgroup

FIXTURES = Path(__file__).parent / "fixtures" / "runner"


def snap(name: str) -> cgroup.TaskSnapshot:
    return cgroup.parse_snapshot((FIXTURES / name).read_text())


def test_v1_snapshot_of_a_real_task():
    before = snap("snapshot-v1-before.txt")
    assert before.counters == cgroup.CgroupCounters(
        source="cgroup-v1", nr_periods=4, nr_throttled=3, throttled_ns=308976848, usage_ns=124555381,
        period_us=100000, quota_us=25000, peak_memory_bytes=16232448)
    assert before.roles == {"app": 10, "proxy": 11, "agent": 12}
    assert before.clk_tck == 100
    assert {p.comm for p in before.processes} >= {"entrypoint.sh", "app-go", "python3"}


def test_v1_deltas_over_a_throttled_window():
    delta = cgroup.counters_delta(snap("snapshot-v1-before.txt").counters, snap("snapshot-v1-after.txt").counters)
    assert delta == {"source": "cgroup-v1", "nr_periods": 23, "nr_throttled": 23,
                     "throttled_s": pytest.approx(3.50077979), "usage_s": pytest.approx(0.551086381),
                     "period_us": 100000, "quota_us": 25000}


def test_v1_role_cpu_adds_up_to_the_cgroups_usage():
    before, after = snap("snapshot-v1-before.txt"), snap("snapshot-v1-after.txt")
    roles = cgroup.role_cpu_seconds(before, after)
    assert roles == {"app": pytest.approx(0.34), "proxy": pytest.approx(0.09), "agent": pytest.approx(0.11)}
    usage = cgroup.counters_delta(before.counters, after.counters)["usage_s"]
    # Ticks are 10 ms; the rest of the usage is the snapshot shell itself.
    assert usage - 0.05 <= sum(roles.values()) <= usage + 0.03


def test_v2_handwritten_snapshot_units_and_limits():
    before, after = snap("snapshot-v2-before.handwritten.txt"), snap("snapshot-v2-after.handwritten.txt")
    assert after.counters.source == "cgroup-v2"
    assert (after.counters.quota_us, after.counters.period_us, after.counters.peak_memory_bytes) == (
        25000, 100000, 41943040)
    delta = cgroup.counters_delta(before.counters, after.counters)
    assert (delta["nr_periods"], delta["nr_throttled"]) == (100, 90)
    assert delta["throttled_s"] == pytest.approx(7.5) and delta["usage_s"] == pytest.approx(2.5)


def test_role_cpu_counts_child_processes_and_reaped_children():
    before, after = snap("snapshot-v2-before.handwritten.txt"), snap("snapshot-v2-after.handwritten.txt")
    # app: node (utime+stime+cutime+cstime) 180 -> 375 ticks, its child 50 -> 110 ticks.
    assert cgroup.role_cpu_seconds(before, after) == {"app": pytest.approx(2.55), "proxy": pytest.approx(0.25)}


def test_proc_stat_comm_with_spaces_and_parentheses():
    proc = snap("snapshot-v2-after.handwritten.txt").processes[2]
    assert (proc.pid, proc.comm, proc.ppid, proc.utime, proc.stime) == (8, "next-server (v1)", 7, 90, 20)


def test_cpu_max_without_limit():
    assert cgroup.parse_cpu_max("max 100000\n") == (-1, 100000)


def test_docker_stats_api_fallback():
    counters = cgroup.parse_docker_stats(json.loads((FIXTURES / "docker-stats-v1.json").read_text()))
    assert counters == cgroup.CgroupCounters(source="docker-api", nr_periods=27, nr_throttled=26,
                                             throttled_ns=3809756638, usage_ns=691637140,
                                             peak_memory_bytes=19927040)


def test_snapshot_without_cgroup_files_has_no_counters():
    text = (FIXTURES / "snapshot-v1-after.txt").read_text()
    kept = text[text.index("@@file /run/sidecar-bench/roles"):]
    assert cgroup.parse_snapshot(kept).counters is None


def test_cut_short_snapshot_is_refused():
    text = (FIXTURES / "snapshot-v1-after.txt").read_text().replace("@@end", "")
    with pytest.raises(cgroup.SnapshotError, match="cut short"):
        cgroup.parse_snapshot(text)


def test_counters_going_backwards_mean_a_restart():
    with pytest.raises(cgroup.SnapshotError, match="restarted"):
        cgroup.counters_delta(snap("snapshot-v1-after.txt").counters, snap("snapshot-v1-before.txt").counters)


def test_a_role_process_that_exits_in_the_window_fails_the_run():
    before = snap("snapshot-v1-before.txt")
    text = (FIXTURES / "snapshot-v1-after.txt").read_text()
    gone = "\n".join(line for line in text.splitlines() if not line.startswith("@@stat 11 "))
    with pytest.raises(cgroup.SnapshotError, match="role proxy: process 11 exited"):
        cgroup.role_cpu_seconds(before, cgroup.parse_snapshot(gone))


def test_malformed_roles_file_is_named():
    with pytest.raises(cgroup.SnapshotError, match="line 2"):
        cgroup.parse_roles("app 10\nproxy\n")


def test_v1_limits_are_read_back_from_a_real_task():
    # Recorded from a go-sidecar task started with 0.25 vCPU and 512 MiB, swap equal to memory.
    after = snap("snapshot-v1-limits-after.txt")
    assert after.limits.as_dict() == {"cpu_quota_us": 25000, "cpu_period_us": 100000, "vcpu": 0.25,
                                      "memory_limit_bytes": 512 * 2**20, "swap_limit_bytes": 0}


def test_v2_limits_and_no_limit():
    assert snap("snapshot-v2-after.handwritten.txt").limits.as_dict() == {
        "cpu_quota_us": 25000, "cpu_period_us": 100000, "vcpu": 0.25, "memory_limit_bytes": 512 * 2**20,
        "swap_limit_bytes": 0}
    unlimited = cgroup.parse_limits({"/sys/fs/cgroup/cpu.max": "max 100000\n", "/sys/fs/cgroup/memory.max": "max\n"})
    assert (unlimited.vcpu, unlimited.memory_limit_bytes, unlimited.swap_limit_bytes) == (None, -1, None)


def test_host_cpu_over_the_window_from_proc_stat():
    before, after = snap("snapshot-v1-limits-before.txt"), snap("snapshot-v1-limits-after.txt")
    host = cgroup.host_cpu_delta(before, after)
    # Two CPUs over the ~1 s between the snapshots, both busy then (other jobs ran beside the recording):
    # user +194 and system +22 ticks, idle +0.
    assert host == {"cpus": 2, "busy_s": pytest.approx(2.16), "total_s": pytest.approx(2.16)}


def test_host_cpu_counts_steal_and_irq_as_busy_and_iowait_as_idle():
    host = cgroup.host_cpu_delta(snap("snapshot-v2-before.handwritten.txt"), snap("snapshot-v2-after.handwritten.txt"))
    # user +300, system +100, irq +5, softirq +10 busy; idle +950, iowait +50; guest (inside user) not again.
    assert host == {"cpus": 4, "busy_s": pytest.approx(4.15), "total_s": pytest.approx(14.15)}


# ---- any values the kernel can write (hypothesis) -----------------------------------------------


counts = st.integers(min_value=0, max_value=2**63 // 1000 - 1)
# A comm is up to 15 bytes of whatever the process named itself: spaces and parentheses included.
comms = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=0, max_size=15)
V1_NO_LIMIT_4K = 9223372036854771712  # what v1 shows for "no limit" with 4 KiB pages


@settings(max_examples=200, deadline=None)
@given(pid=st.integers(1, 2**22), comm=comms, ppid=st.integers(0, 2**22), times=st.lists(counts, min_size=5, max_size=5))
def test_any_proc_stat_line_keeps_its_pid_comm_and_cpu_times(pid, comm, ppid, times):
    utime, stime, cutime, cstime, starttime = times
    # Fields 3.. of /proc/PID/stat: state, ppid, then counters up to field 52.
    fields = ["S", ppid, 1, 1, 0, -1, 4194560, 0, 0, 0, 0, utime, stime, cutime, cstime, 20, 0, 1, 0, starttime]
    line = f"{pid} ({comm}) " + " ".join(map(str, fields + [0] * 32))
    proc = cgroup.parse_proc_stat(line)
    assert (proc.pid, proc.comm, proc.ppid, proc.starttime) == (pid, comm, ppid, starttime)
    assert proc.ticks == utime + stime + cutime + cstime


def snapshot_text(files: dict) -> str:
    body = "".join(f"@@file {path}\n{text}" for path, text in files.items())
    return body + "@@clk_tck 100\n@@end\n"


@settings(max_examples=150, deadline=None)
@given(version=st.sampled_from(["v1", "v2"]), periods=counts, throttled=counts, throttled_time=counts, usage=counts,
       quota=st.integers(1000, 10**7), period=st.integers(1000, 10**6))
def test_any_counters_read_back_in_nanoseconds_on_either_hierarchy(version, periods, throttled, throttled_time, usage,
                                                                    quota, period):
    if version == "v1":
        files = {cgroup.V1_FILES[0]: f"nr_periods {periods}\nnr_throttled {throttled}\nthrottled_time {throttled_time * 1000}\n",
                 cgroup.V1_FILES[1]: f"{usage * 1000}\n", cgroup.V1_FILES[2]: f"{quota}\n",
                 cgroup.V1_FILES[3]: f"{period}\n"}
    else:
        files = {cgroup.V2_FILES[0]: f"usage_usec {usage}\nuser_usec 0\nsystem_usec {usage}\nnr_periods {periods}\n"
                                     f"nr_throttled {throttled}\nthrottled_usec {throttled_time}\n",
                 cgroup.V2_FILES[1]: f"{quota} {period}\n"}
    counters = cgroup.parse_snapshot(snapshot_text(files)).counters
    assert counters == cgroup.CgroupCounters(source=f"cgroup-{version}", nr_periods=periods, nr_throttled=throttled,
                                             throttled_ns=throttled_time * 1000, usage_ns=usage * 1000,
                                             period_us=period, quota_us=quota)


memory_limits = st.integers(6 * 2**20, 2**40).map(lambda b: b // 4096 * 4096)


@settings(max_examples=150, deadline=None)
@given(memory=memory_limits, swap=st.none() | st.integers(0, 2**40).map(lambda b: b // 4096 * 4096))
def test_any_swap_limit_reads_back_the_same_on_either_hierarchy(memory, swap):
    # swap None: no swap limit (docker run --memory-swap -1).
    v1 = {cgroup.V1_FILES[5]: f"{memory}\n",
          cgroup.V1_FILES[6]: f"{V1_NO_LIMIT_4K if swap is None else memory + swap}\n"}
    v2 = {cgroup.V2_FILES[3]: f"{memory}\n", cgroup.V2_FILES[4]: "max\n" if swap is None else f"{swap}\n"}
    host_config = {"Memory": memory, "MemorySwap": -1 if swap is None else memory + swap}
    for limits in (cgroup.parse_limits(v1), cgroup.parse_limits(v2), cgroup.limits_from_host_config(host_config)):
        assert (limits.memory_limit_bytes, limits.swap_limit_bytes) == (memory, -1 if swap is None else swap)


# ---- a real cgroup v2 hierarchy ------------------------------------------------------------------


# In a private mount namespace: a cgroup of its own in this machine's v2 hierarchy, then a cgroup
# namespace rooted there with cgroup2 mounted at /sys/fs/cgroup, which is what a container on a v2 host
# sees. A busy loop is its "app" (roles file on a private tmpfs); the snapshot script runs twice,
# 1 s apart. The cgroup is removed afterwards; nothing is visible outside the namespaces.
V2_DRIVER = r"""
set -e
mnt=$(mktemp -d)
mount -t cgroup2 none "$mnt"
cg="$mnt/sidecar-bench-test-$$"
mkdir "$cg"
echo $$ > "$cg/cgroup.procs"
set +e
unshare --cgroup --mount sh -c "$1" inner "$2"
rc=$?
echo $$ > "$mnt/cgroup.procs"
rmdir "$cg"; umount "$mnt"; rmdir "$mnt"
exit $rc
"""
V2_INNER = r"""
set -e
mount -t cgroup2 none /sys/fs/cgroup
mkdir -p /run/sidecar-bench && mount -t tmpfs tmpfs /run/sidecar-bench
( i=0; while :; do i=$((i + 1)); done ) &
app=$!
echo "app $app" > /run/sidecar-bench/roles
sh -c "$1"
echo @@split
sleep 1
sh -c "$1"
kill $app
wait $app || true
"""


def v2_snapshots() -> tuple[cgroup.TaskSnapshot, cgroup.TaskSnapshot]:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to mount a cgroup v2 hierarchy in a private namespace")
    done = subprocess.run(["unshare", "--mount", "sh", "-c", V2_DRIVER, "driver", V2_INNER, cgroup.SNAPSHOT_SCRIPT],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    left = [*Path("/sys/fs/cgroup").glob("sidecar-bench-test-*"), *Path("/sys/fs/cgroup").glob("*/sidecar-bench-test-*")]
    assert not left, f"the test left its cgroup behind: {left}"
    before, _, after = done.stdout.partition("@@split\n")
    return cgroup.parse_snapshot(before), cgroup.parse_snapshot(after)


def test_a_real_cgroup_v2_task_reads_back_its_counters_and_its_roles_cpu():
    before, after = v2_snapshots()
    assert before.counters.source == after.counters.source == "cgroup-v2"
    delta = cgroup.counters_delta(before.counters, after.counters)
    roles = cgroup.role_cpu_seconds(before, after)
    # The busy loop had up to one CPU for the ~1 s between the snapshots (less on a busy host).
    assert 0.05 < roles["app"] <= 1.2 and 0.05 < delta["usage_s"] <= 1.2, (roles, delta)
    # The cgroup's usage is the loop's (10 ms ticks) plus the first snapshot's own reads after its counters.
    assert delta["usage_s"] - 0.1 <= roles["app"] <= delta["usage_s"] + 0.03, (roles, delta)


def test_a_real_cgroup_v2_task_without_the_cpu_and_memory_controllers_is_refused():
    # Here cpu and memory are bound to cgroup v1: the v2 cgroup has neither cpu.max nor memory.max, and
    # counts no CFS periods, as on a v2 host that does not delegate the controllers to containers.
    before, after = v2_snapshots()
    if cgroup.V2_FILES[1] in after.files:
        pytest.skip("this host's v2 hierarchy has the cpu controller: limits are tested on the real engine")
    assert cgroup.counters_delta(before.counters, after.counters)["nr_periods"] == 0
    assert after.limits is None
    from sidecar_bench import runner
    from sidecar_bench.conditions import Condition

    with pytest.raises(runner.RunError, match="expected a CPU limit of 0.25 vCPU on the task's cgroup, found no "
                                              "cgroup limit files"):
        runner.check_limits(Condition("go", 0.25, 512, 0, 0), after.limits, nr_periods=0)
