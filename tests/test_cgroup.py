"""cgroup snapshots -> counters and per-role CPU, from a real cgroup v1 task, hand-written v2 samples and a real v2
hierarchy mounted in a private namespace."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sidecar_bench import cgroup

FIXTURES = Path(__file__).parent / "fixtures" / "runner"


def snap(name: str) -> cgroup.TaskSnapshot:
    return cgroup.parse_snapshot((FIXTURES / name).read_text())


def test_v1_snapshot_of_a_real_task():
    before = snap("snapshot-v1-before.txt")
    assert before.counters == cgroup.CgroupCounters(
        source="cgroup-v1",
        nr_periods=4,
        nr_throttled=3,
        throttled_ns=308976848,
        usage_ns=124555381,
        period_us=100000,
        quota_us=25000,
        peak_memory_bytes=16232448,
        nr_bursts=0,
        burst_ns=0,
    )
    assert before.roles == {"app": 10, "proxy": 11, "agent": 12}
    assert before.clk_tck == 100
    assert {p.comm for p in before.processes} >= {"entrypoint.sh", "app-go", "python3"}


def test_v1_deltas_over_a_throttled_window():
    delta = cgroup.counters_delta(
        snap("snapshot-v1-before.txt").counters, snap("snapshot-v1-after.txt").counters
    )
    assert delta == {
        "source": "cgroup-v1",
        "nr_periods": 23,
        "nr_throttled": 23,
        "throttled_s": pytest.approx(3.50077979),
        "usage_s": pytest.approx(0.551086381),
        "period_us": 100000,
        "quota_us": 25000,
        "nr_bursts": 0,
        "burst_s": 0.0,
    }


def test_v1_role_cpu_adds_up_to_the_cgroups_usage():
    before, after = snap("snapshot-v1-before.txt"), snap("snapshot-v1-after.txt")
    roles = cgroup.role_cpu_seconds(before, after)
    assert roles == {
        "app": pytest.approx(0.34),
        "proxy": pytest.approx(0.09),
        "agent": pytest.approx(0.11),
    }
    usage = cgroup.counters_delta(before.counters, after.counters)["usage_s"]
    # Ticks are 10 ms; the rest of the usage is the snapshot shell itself.
    assert usage - 0.05 <= sum(roles.values()) <= usage + 0.03


def test_v2_handwritten_snapshot_units_and_limits():
    before, after = (
        snap("snapshot-v2-before.handwritten.txt"),
        snap("snapshot-v2-after.handwritten.txt"),
    )
    assert after.counters.source == "cgroup-v2"
    assert (
        after.counters.quota_us,
        after.counters.period_us,
        after.counters.peak_memory_bytes,
    ) == (25000, 100000, 41943040)
    delta = cgroup.counters_delta(before.counters, after.counters)
    assert (delta["nr_periods"], delta["nr_throttled"]) == (100, 90)
    assert delta["throttled_s"] == pytest.approx(7.5) and delta["usage_s"] == pytest.approx(2.5)


def test_role_cpu_counts_child_processes_and_reaped_children():
    before, after = (
        snap("snapshot-v2-before.handwritten.txt"),
        snap("snapshot-v2-after.handwritten.txt"),
    )
    # app: node (utime+stime+cutime+cstime) 180 -> 375 ticks, its child 50 -> 110 ticks.
    assert cgroup.role_cpu_seconds(before, after) == {
        "app": pytest.approx(2.55),
        "proxy": pytest.approx(0.25),
    }


def test_proc_stat_comm_with_spaces_and_parentheses():
    proc = snap("snapshot-v2-after.handwritten.txt").processes[2]
    assert (proc.pid, proc.comm, proc.ppid, proc.utime, proc.stime) == (
        8,
        "next-server (v1)",
        7,
        90,
        20,
    )


def test_cpu_max_without_limit():
    assert cgroup.parse_cpu_max("max 100000\n") == (-1, 100000)


def test_docker_stats_api_fallback():
    counters = cgroup.parse_docker_stats(
        json.loads((FIXTURES / "docker-stats-v1.json").read_text())
    )
    assert counters == cgroup.CgroupCounters(
        source="docker-api",
        nr_periods=27,
        nr_throttled=26,
        throttled_ns=3809756638,
        usage_ns=691637140,
        peak_memory_bytes=19927040,
    )


def test_snapshot_without_cgroup_files_has_no_counters():
    text = (FIXTURES / "snapshot-v1-after.txt").read_text()
    kept = text[text.index("@@file /run/sidecar-bench/roles") :]
    assert cgroup.parse_snapshot(kept).counters is None


def test_cut_short_snapshot_is_refused():
    text = (FIXTURES / "snapshot-v1-after.txt").read_text().replace("@@end", "")
    with pytest.raises(cgroup.SnapshotError, match="cut short"):
        cgroup.parse_snapshot(text)


def test_counters_going_backwards_mean_a_restart():
    with pytest.raises(cgroup.SnapshotError, match="restarted"):
        cgroup.counters_delta(
            snap("snapshot-v1-after.txt").counters, snap("snapshot-v1-before.txt").counters
        )


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
    # (recorded before the snapshot read the knobs' files: burst, shares and cpuset are unknown)
    assert after.limits.as_dict() == {
        "cpu_quota_us": 25000,
        "cpu_period_us": 100000,
        "vcpu": 0.25,
        "memory_limit_bytes": 512 * 2**20,
        "swap_limit_bytes": 0,
        "cpu_burst_us": None,
        "cpu_shares": None,
        "cpu_weight": None,
        "cpuset_cpus": None,
    }


def test_v2_limits_and_no_limit():
    assert snap("snapshot-v2-after.handwritten.txt").limits.as_dict() == {
        "cpu_quota_us": 25000,
        "cpu_period_us": 100000,
        "vcpu": 0.25,
        "memory_limit_bytes": 512 * 2**20,
        "swap_limit_bytes": 0,
        "cpu_burst_us": None,
        "cpu_shares": None,
        "cpu_weight": None,
        "cpuset_cpus": None,
    }
    unlimited = cgroup.parse_limits(
        {"/sys/fs/cgroup/cpu.max": "max 100000\n", "/sys/fs/cgroup/memory.max": "max\n"}
    )
    assert (unlimited.vcpu, unlimited.memory_limit_bytes, unlimited.swap_limit_bytes) == (
        None,
        -1,
        None,
    )


def test_host_cpu_over_the_window_from_proc_stat():
    before, after = snap("snapshot-v1-limits-before.txt"), snap("snapshot-v1-limits-after.txt")
    host = cgroup.host_cpu_delta(before, after)
    # Two CPUs over the ~1 s between the snapshots, both busy then (other jobs ran beside the recording):
    # user +194 and system +22 ticks, idle +0.
    assert host == {"cpus": 2, "busy_s": pytest.approx(2.16), "total_s": pytest.approx(2.16)}


def test_host_cpu_counts_steal_and_irq_as_busy_and_iowait_as_idle():
    host = cgroup.host_cpu_delta(
        snap("snapshot-v2-before.handwritten.txt"), snap("snapshot-v2-after.handwritten.txt")
    )
    # user +300, system +100, irq +5, softirq +10 busy; idle +950, iowait +50; guest (inside user) not again.
    assert host == {"cpus": 4, "busy_s": pytest.approx(4.15), "total_s": pytest.approx(14.15)}


def test_the_knobs_settings_and_burst_counters_read_back_on_v1_and_v2():
    v1 = cgroup.parse_limits(
        {
            "/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "1250\n",
            "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "5000\n",
            "/sys/fs/cgroup/cpu/cpu.cfs_burst_us": "625\n",
            "/sys/fs/cgroup/cpu/cpu.shares": "1024\n",
            "/sys/fs/cgroup/cpuset/cpuset.cpus": "1\n",
        }
    )
    assert (v1.vcpu, v1.cpu_burst_us, v1.cpu_shares, v1.cpuset_cpus) == (0.25, 625, 1024, "1")
    v2 = cgroup.parse_limits(
        {
            "/sys/fs/cgroup/cpu.max": "max 100000\n",
            "/sys/fs/cgroup/cpu.max.burst": "0\n",
            "/sys/fs/cgroup/cpu.weight": "39\n",
            "/sys/fs/cgroup/cpuset.cpus.effective": "0-1\n",
        }
    )
    assert (v2.cpu_quota_us, v2.cpu_burst_us, v2.cpu_weight, v2.cpuset_cpus) == (-1, 0, 39, "0-1")
    stat = "usage_usec 10\nnr_periods 5\nnr_throttled 1\nthrottled_usec 7\nnr_bursts {}\nburst_usec {}\n"
    before = cgroup.parse_v2({"/sys/fs/cgroup/cpu.stat": stat.format(2, 300)})
    after = cgroup.parse_v2({"/sys/fs/cgroup/cpu.stat": stat.format(5, 1300)})
    delta = cgroup.counters_delta(before, after)
    assert (delta["nr_bursts"], delta["burst_s"]) == (3, pytest.approx(0.001))
    # A kernel without CFS burst reports neither: the delta has no burst keys (NaN in the summary).
    old = cgroup.parse_v2({"/sys/fs/cgroup/cpu.stat": "usage_usec 10\nnr_periods 5\n"})
    assert "nr_bursts" not in cgroup.counters_delta(old, old)


# ---- any values the kernel can write (hypothesis) -----------------------------------------------


counts = st.integers(min_value=0, max_value=2**63 // 1000 - 1)
# A comm is up to 15 bytes of whatever the process named itself: spaces and parentheses included.
comms = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=0, max_size=15)
V1_NO_LIMIT_4K = 9223372036854771712  # what v1 shows for "no limit" with 4 KiB pages


@given(
    pid=st.integers(1, 2**22),
    comm=comms,
    ppid=st.integers(0, 2**22),
    times=st.lists(counts, min_size=5, max_size=5),
)
def test_any_proc_stat_line_keeps_its_pid_comm_and_cpu_times(pid, comm, ppid, times):
    utime, stime, cutime, cstime, starttime = times
    # Fields 3.. of /proc/PID/stat: state, ppid, then counters up to field 52.
    fields = [
        "S",
        ppid,
        1,
        1,
        0,
        -1,
        4194560,
        0,
        0,
        0,
        0,
        utime,
        stime,
        cutime,
        cstime,
        20,
        0,
        1,
        0,
        starttime,
    ]
    line = f"{pid} ({comm}) " + " ".join(map(str, fields + [0] * 32))
    proc = cgroup.parse_proc_stat(line)
    assert (proc.pid, proc.comm, proc.ppid, proc.starttime) == (pid, comm, ppid, starttime)
    assert proc.ticks == utime + stime + cutime + cstime


def snapshot_text(files: dict) -> str:
    body = "".join(f"@@file {path}\n{text}" for path, text in files.items())
    return body + "@@clk_tck 100\n@@end\n"


@given(
    version=st.sampled_from(["v1", "v2"]),
    periods=counts,
    throttled=counts,
    throttled_time=counts,
    usage=counts,
    quota=st.integers(1000, 10**7),
    period=st.integers(1000, 10**6),
)
def test_any_counters_read_back_in_nanoseconds_on_either_hierarchy(
    version, periods, throttled, throttled_time, usage, quota, period
):
    if version == "v1":
        files = {
            cgroup.V1_FILES[
                0
            ]: f"nr_periods {periods}\nnr_throttled {throttled}\nthrottled_time {throttled_time * 1000}\n",
            cgroup.V1_FILES[1]: f"{usage * 1000}\n",
            cgroup.V1_FILES[2]: f"{quota}\n",
            cgroup.V1_FILES[3]: f"{period}\n",
        }
    else:
        files = {
            cgroup.V2_FILES[
                0
            ]: f"usage_usec {usage}\nuser_usec 0\nsystem_usec {usage}\nnr_periods {periods}\n"
            f"nr_throttled {throttled}\nthrottled_usec {throttled_time}\n",
            cgroup.V2_FILES[1]: f"{quota} {period}\n",
        }
    counters = cgroup.parse_snapshot(snapshot_text(files)).counters
    assert counters == cgroup.CgroupCounters(
        source=f"cgroup-{version}",
        nr_periods=periods,
        nr_throttled=throttled,
        throttled_ns=throttled_time * 1000,
        usage_ns=usage * 1000,
        period_us=period,
        quota_us=quota,
    )


memory_limits = st.integers(6 * 2**20, 2**40).map(lambda b: b // 4096 * 4096)


@given(memory=memory_limits, swap=st.none() | st.integers(0, 2**40).map(lambda b: b // 4096 * 4096))
def test_any_swap_limit_reads_back_the_same_on_either_hierarchy(memory, swap):
    # swap None: no swap limit (docker run --memory-swap -1).
    v1 = {
        cgroup.V1_FILES[5]: f"{memory}\n",
        cgroup.V1_FILES[6]: f"{V1_NO_LIMIT_4K if swap is None else memory + swap}\n",
    }
    v2 = {
        cgroup.V2_FILES[3]: f"{memory}\n",
        cgroup.V2_FILES[4]: "max\n" if swap is None else f"{swap}\n",
    }
    host_config = {"Memory": memory, "MemorySwap": -1 if swap is None else memory + swap}
    for limits in (
        cgroup.parse_limits(v1),
        cgroup.parse_limits(v2),
        cgroup.limits_from_host_config(host_config),
    ):
        assert (limits.memory_limit_bytes, limits.swap_limit_bytes) == (
            memory,
            -1 if swap is None else swap,
        )


# ---- a real cgroup v2 hierarchy ------------------------------------------------------------------


# In a private mount namespace: a cgroup of its own in this machine's v2 hierarchy, then a cgroup
# namespace rooted there with cgroup2 mounted at /sys/fs/cgroup, which is what a container on a v2 host
# sees. A busy loop is its "app" (roles file on a private tmpfs); the snapshot script runs twice,
# 0.5 s apart. The cgroup is removed afterwards; nothing is visible outside the namespaces.
V2_DRIVER = r"""
set -e
mnt=$(mktemp -d)
mount -t cgroup2 none "$mnt"
cg="$mnt/sidecar-bench-test-$$"
mkdir "$cg"
echo "${cg##*/}" >&2
echo $$ > "$cg/cgroup.procs"
set +e
unshare --cgroup --mount sh -c "$1" inner "$2"
rc=$?
echo $$ > "$mnt/cgroup.procs"
# A killed process leaves its cgroup a moment after its parent has reaped it.
i=0
until rmdir "$cg" 2>/dev/null || [ $i -ge 100 ]; do i=$((i + 1)); sleep 0.1; done
umount "$mnt"; rmdir "$mnt"
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
sleep 0.5
sh -c "$1"
kill $app
wait $app || true
"""


@pytest.fixture(scope="module")
def v2_snapshots() -> tuple[cgroup.TaskSnapshot, cgroup.TaskSnapshot]:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip(
            "needs root and unshare(1) to mount a cgroup v2 hierarchy in a private namespace"
        )
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", V2_DRIVER, "driver", V2_INNER, cgroup.SNAPSHOT_SCRIPT],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    name = done.stderr.split()[0]
    left = [*Path("/sys/fs/cgroup").glob(name), *Path("/sys/fs/cgroup").glob(f"*/{name}")]
    assert name.startswith("sidecar-bench-test-") and not left, (
        f"the test left its cgroup behind: {left}"
    )
    before, _, after = done.stdout.partition("@@split\n")
    return cgroup.parse_snapshot(before), cgroup.parse_snapshot(after)


def test_a_real_cgroup_v2_task_reads_back_its_counters_and_its_roles_cpu(v2_snapshots):
    before, after = v2_snapshots
    assert before.counters.source == after.counters.source == "cgroup-v2"
    delta = cgroup.counters_delta(before.counters, after.counters)
    roles = cgroup.role_cpu_seconds(before, after)
    # The busy loop had up to one CPU for the ~0.5 s between the snapshots (less on a busy host).
    assert 0.02 < roles["app"] <= 1.0 and 0.02 < delta["usage_s"] <= 1.0, (roles, delta)
    # The cgroup's usage is the loop's (10 ms ticks) plus the first snapshot's own reads after its counters.
    assert delta["usage_s"] - 0.1 <= roles["app"] <= delta["usage_s"] + 0.03, (roles, delta)


def test_a_real_cgroup_v2_task_without_the_cpu_and_memory_controllers_is_refused(v2_snapshots):
    # Here cpu and memory are bound to cgroup v1: the v2 cgroup has neither cpu.max nor memory.max, and
    # counts no CFS periods, as on a v2 host that does not delegate the controllers to containers.
    before, after = v2_snapshots
    if cgroup.V2_FILES[1] in after.files:
        pytest.skip(
            "this host's v2 hierarchy has the cpu controller: limits are tested on the real engine"
        )
    assert cgroup.counters_delta(before.counters, after.counters)["nr_periods"] == 0
    assert after.limits is None
    from sidecar_bench import runner
    from sidecar_bench.conditions import Condition

    with pytest.raises(
        runner.RunError,
        match="expected a CPU limit of 0.25 vCPU on the task's cgroup, found no cgroup limit files",
    ):
        runner.check_limits(Condition("go", 0.25, 512, 0, 0), after.limits, nr_periods=0)


# ---- what each file and field means (one case per rule) ------------------------------------------


def test_v1_v2_and_docker_counters_are_exact_in_nanoseconds_and_seconds():
    delta = cgroup.counters_delta(
        snap("snapshot-v1-before.txt").counters, snap("snapshot-v1-after.txt").counters
    )
    # 3,500,779,790 ns throttled and 551,086,381 ns used between the recorded snapshots.
    assert (delta["throttled_s"], delta["usage_s"]) == (3.50077979, 0.551086381)
    # Counters that stood still (an idle window) are a valid zero, not a restart.
    same = snap("snapshot-v1-after.txt").counters
    assert cgroup.counters_delta(same, same)["nr_periods"] == 0


def test_a_v2_cgroup_without_the_cpu_controller_counts_usage_only():
    # cpu.stat then has usage_usec, user_usec and system_usec only, and there is no cpu.max.
    text = "@@file /sys/fs/cgroup/cpu.stat\nusage_usec 1500\nuser_usec 1000\nsystem_usec 500\n@@clk_tck 100\n@@end\n"
    assert cgroup.parse_snapshot(text).counters == cgroup.CgroupCounters(
        source="cgroup-v2", nr_periods=0, nr_throttled=0, throttled_ns=0, usage_ns=1_500_000
    )


def test_a_v1_snapshot_missing_cpuacct_or_cpu_stat_has_no_counters_instead_of_failing():
    # Without either file the runner brackets the window with the Docker stats API instead.
    text = (FIXTURES / "snapshot-v1-after.txt").read_text()
    for path in ("/sys/fs/cgroup/cpuacct/cpuacct.usage", "/sys/fs/cgroup/cpu/cpu.stat"):
        start = text.index(f"@@file {path}")
        end = text.index("@@file", start + 1)
        assert cgroup.parse_snapshot(text[:start] + text[end:]).counters is None, path


def test_lines_outside_a_file_are_ignored():
    # A shell's warning on stdout, before the first file or after a process line, is not part of any file.
    text = (FIXTURES / "snapshot-v2-after.handwritten.txt").read_text()
    noisy = "sh: warning\n" + text.replace("@@clk_tck 100\n", "@@clk_tck 100\nnoise\n")
    noisy = noisy.replace(
        "@@cpu cpu3 0 0 0 0 0 0 0 0 0 0\n", "@@cpu cpu3 0 0 0 0 0 0 0 0 0 0\nnoise\n"
    )
    noisy = noisy.replace("\n@@stat 7 ", "\nnoise\n@@stat 7 ") + "trailing\n"
    assert cgroup.parse_snapshot(noisy) == cgroup.parse_snapshot(text)


def test_v1_without_a_cpu_limit_reads_quota_minus_one():
    limits = cgroup.parse_limits({cgroup.V1_FILES[2]: "-1\n", cgroup.V1_FILES[3]: "100000\n"})
    assert (limits.cpu_quota_us, limits.vcpu) == (-1, None)


def test_docker_stats_without_throttling_or_memory_data():
    counters = cgroup.parse_docker_stats({"cpu_stats": {"cpu_usage": {"total_usage": 5}}})
    assert counters == cgroup.CgroupCounters(
        source="docker-api",
        nr_periods=0,
        nr_throttled=0,
        throttled_ns=0,
        usage_ns=5,
        peak_memory_bytes=None,
    )


def test_counters_refuse_unknown_sources_and_negative_values_naming_them():
    with pytest.raises(cgroup.SnapshotError, match=r"^unknown counter source 'cgroup-v3'$"):
        cgroup.CgroupCounters(
            source="cgroup-v3", nr_periods=0, nr_throttled=0, throttled_ns=0, usage_ns=0
        )
    with pytest.raises(cgroup.SnapshotError, match=r"^nr_throttled is negative: -1$"):
        cgroup.CgroupCounters(
            source="cgroup-v1", nr_periods=0, nr_throttled=-1, throttled_ns=0, usage_ns=0
        )
    v1, v2 = (
        snap("snapshot-v1-after.txt").counters,
        snap("snapshot-v2-after.handwritten.txt").counters,
    )
    with pytest.raises(
        cgroup.SnapshotError, match=r"^counter sources differ: cgroup-v1 then cgroup-v2$"
    ):
        cgroup.counters_delta(v1, v2)
    with pytest.raises(
        cgroup.SnapshotError,
        match=r"went backwards \(nr_periods, nr_throttled, throttled_s, usage_s\)",
    ):
        cgroup.counters_delta(
            snap("snapshot-v1-after.txt").counters, snap("snapshot-v1-before.txt").counters
        )


def test_snapshot_clock_ticks_uptime_and_roles_default():
    text = (FIXTURES / "snapshot-v2-after.handwritten.txt").read_text()
    after = cgroup.parse_snapshot(text)
    assert (after.clk_tck, after.uptime_s, after.files["/sys/fs/cgroup/memory.swap.max"]) == (
        100,
        1010.0,
        "0\n",
    )
    # Another tick rate is used as given; no /proc/uptime and no roles file are None and no roles.
    other = text.replace("@@clk_tck 100", "@@clk_tck 250")
    without = "\n".join(
        line for line in other.splitlines() if not line.startswith(("1010.00", "app 7", "proxy 9"))
    )
    without = without.replace("@@file /proc/uptime\n", "").replace(
        "@@file /run/sidecar-bench/roles\n", ""
    )
    parsed = cgroup.parse_snapshot(without)
    assert (parsed.clk_tck, parsed.uptime_s, parsed.roles) == (250, None, {})
    # No tick rate printed: Linux's USER_HZ, 100.
    assert cgroup.parse_snapshot(text.replace("@@clk_tck 100\n", "")).clk_tck == 100
    cut = text.replace("@@end", "")
    with pytest.raises(cgroup.SnapshotError) as err:
        cgroup.parse_snapshot(cut)
    # The end of what arrived, where it was cut.
    assert str(err.value) == f"snapshot output is cut short (no @@end): {cut[-300:]!r}"
    with pytest.raises(
        cgroup.SnapshotError, match=r"^/sys/fs/cgroup/cpu.stat is missing from the snapshot$"
    ):
        cgroup.parse_v2({})


def test_roles_file_with_a_blank_line_keeps_the_roles_after_it():
    assert cgroup.parse_roles("app 10\n\nproxy 11\n") == {"app": 10, "proxy": 11}


def test_role_cpu_names_a_missing_roles_file_and_a_role_that_never_ran():
    before, after = snap("snapshot-v1-before.txt"), snap("snapshot-v1-after.txt")
    no_roles = cgroup.TaskSnapshot(counters=None, roles={}, processes=before.processes, clk_tck=100)
    with pytest.raises(
        cgroup.SnapshotError,
        match=r"^/run/sidecar-bench/roles is missing or empty: cannot tell the "
        r"app from the sidecars$",
    ):
        cgroup.role_cpu_seconds(no_roles, after)
    ghost = cgroup.TaskSnapshot(
        counters=None, roles={"agent": 99999}, processes=before.processes, clk_tck=100
    )
    with pytest.raises(
        cgroup.SnapshotError,
        match=r"^role agent: process 99999 from /run/sidecar-bench/roles is not "
        r"running$",
    ):
        cgroup.role_cpu_seconds(ghost, after)


def test_a_role_whose_process_has_no_children_counts_its_own_ticks_only():
    line = "{pid} (x) S {ppid} 1 1 0 -1 0 0 0 0 0 {utime} 0 0 0 20 0 1 0 {start} 0 0"

    def procs(utime):
        return tuple(
            cgroup.parse_proc_stat(line.format(pid=pid, ppid=1, utime=utime, start=pid))
            for pid in (10, 11)
        )

    before = cgroup.TaskSnapshot(
        counters=None, roles={"app": 10, "proxy": 11}, processes=procs(5), clk_tck=100
    )
    after = cgroup.TaskSnapshot(
        counters=None, roles={"app": 10, "proxy": 11}, processes=procs(25), clk_tck=100
    )
    assert cgroup.role_cpu_seconds(before, after) == {"app": 0.2, "proxy": 0.2}


def test_host_cpu_counts_nice_and_steal_as_busy_and_fills_missing_fields_with_zero():
    # Old kernels print fewer fields; nice and steal are CPU the host's processes took from the task's.
    assert cgroup.parse_host_cpu(
        ["cpu  100 20 30 400 5 0 0 7", "cpu0 100 20 30 400 5 0 0 7"]
    ) == cgroup.HostCpu(cpus=1, busy_ticks=157, total_ticks=562)
    assert cgroup.parse_host_cpu(["cpu  1 2 3 4"]) == cgroup.HostCpu(
        cpus=0, busy_ticks=6, total_ticks=10
    )


def test_host_cpu_is_none_unless_both_snapshots_have_it_and_never_goes_backwards():
    before, after = (
        snap("snapshot-v2-before.handwritten.txt"),
        snap("snapshot-v2-after.handwritten.txt"),
    )
    no_host = cgroup.TaskSnapshot(counters=None, roles={}, processes=(), clk_tck=100)
    assert (
        cgroup.host_cpu_delta(no_host, after) is None
        and cgroup.host_cpu_delta(before, no_host) is None
    )
    # An idle host between the snapshots: zero busy is a value, not an error.
    idle = cgroup.TaskSnapshot(
        counters=None,
        roles={},
        processes=(),
        clk_tck=100,
        host=cgroup.HostCpu(
            cpus=2, busy_ticks=after.host.busy_ticks, total_ticks=after.host.total_ticks + 200
        ),
    )
    assert cgroup.host_cpu_delta(after, idle) == {"cpus": 2, "busy_s": 0.0, "total_s": 2.0}
    # Busy time going backwards alone (another host's counters) is refused too.
    other = cgroup.TaskSnapshot(
        counters=None,
        roles={},
        processes=(),
        clk_tck=100,
        host=cgroup.HostCpu(
            cpus=4, busy_ticks=after.host.busy_ticks - 1, total_ticks=after.host.total_ticks + 100
        ),
    )
    with pytest.raises(cgroup.SnapshotError, match=r"went backwards \(busy -1, total 100 ticks\)"):
        cgroup.host_cpu_delta(after, other)
    # No tick passed at all between two reads.
    assert cgroup.host_cpu_delta(after, after) == {"cpus": 4, "busy_s": 0.0, "total_s": 0.0}
    with pytest.raises(
        cgroup.SnapshotError, match=r"^/proc/stat went backwards \(busy -415, total -1415 ticks\)$"
    ):
        cgroup.host_cpu_delta(after, before)


def test_limits_need_only_one_of_the_limit_files():
    mib = 2**20
    # v1 with only the memory files (no cpu quota file readable), v2 with only memory.max.
    v1 = cgroup.parse_limits(
        {cgroup.V1_FILES[5]: f"{512 * mib}\n", cgroup.V1_FILES[6]: f"{512 * mib}\n"}
    )
    assert (v1.cpu_quota_us, v1.memory_limit_bytes, v1.swap_limit_bytes) == (None, 512 * mib, 0)
    v1_cpu = cgroup.parse_limits({cgroup.V1_FILES[2]: "25000\n", cgroup.V1_FILES[3]: "100000\n"})
    assert (v1_cpu.vcpu, v1_cpu.memory_limit_bytes, v1_cpu.swap_limit_bytes) == (0.25, None, None)
    v2 = cgroup.parse_limits({cgroup.V2_FILES[3]: f"{512 * mib}\n", cgroup.V2_FILES[4]: "0\n"})
    assert (v2.cpu_quota_us, v2.cpu_period_us, v2.memory_limit_bytes, v2.swap_limit_bytes) == (
        None,
        None,
        512 * mib,
        0,
    )
    v2_cpu = cgroup.parse_limits({cgroup.V2_FILES[1]: "50000 100000\n"})
    assert (v2_cpu.vcpu, v2_cpu.memory_limit_bytes, v2_cpu.swap_limit_bytes) == (0.5, None, None)
    assert cgroup.parse_limits({cgroup.V2_FILES[2]: "1\n", cgroup.V1_FILES[3]: "100000\n"}) is None
    # Without swap accounting there is no memsw / swap.max file: the memory limit alone, swap unknown.
    for memory_only in (
        {cgroup.V1_FILES[5]: f"{512 * mib}\n"},
        {cgroup.V2_FILES[3]: f"{512 * mib}\n"},
    ):
        limits = cgroup.parse_limits(memory_only)
        assert (limits.memory_limit_bytes, limits.swap_limit_bytes) == (512 * mib, None)


def test_v1_no_limit_reads_as_no_limit_like_v2s_max():
    unlimited = cgroup.parse_limits(
        {cgroup.V1_FILES[5]: f"{V1_NO_LIMIT_4K}\n", cgroup.V1_FILES[6]: f"{V1_NO_LIMIT_4K}\n"}
    )
    assert (unlimited.memory_limit_bytes, unlimited.swap_limit_bytes) == (-1, -1)
    # 64 KiB pages: the largest page-aligned counter is a little lower, still no limit.
    assert (
        cgroup.parse_limits({cgroup.V1_FILES[5]: "9223372036854710272\n"}).memory_limit_bytes == -1
    )


def test_limits_from_the_engines_cpu_settings():
    # docker run --cpu-period 50000 --cpu-quota 12500; --cpus 0.25; no CPU limit at all.
    assert cgroup.limits_from_host_config({"CpuPeriod": 50000, "CpuQuota": 12500}).vcpu == 0.25
    assert cgroup.limits_from_host_config({"NanoCpus": 250_000_000}).as_dict() == {
        "cpu_quota_us": 25000,
        "cpu_period_us": 100000,
        "vcpu": 0.25,
        "memory_limit_bytes": None,
        "swap_limit_bytes": None,
        "cpu_burst_us": None,
        "cpu_shares": None,
        "cpu_weight": None,
        "cpuset_cpus": None,
    }
    assert (
        cgroup.limits_from_host_config({"NanoCpus": 1_500_000_000, "CpuPeriod": 10000}).cpu_quota_us
        == 15000
    )
    # 64 CPUs over the longest period Docker allows (1 s): every digit of the quota counts.
    assert (
        cgroup.limits_from_host_config({"NanoCpus": 64 * 10**9, "CpuPeriod": 10**6}).cpu_quota_us
        == 64 * 10**6
    )
    nothing = cgroup.limits_from_host_config({})
    assert (nothing.cpu_quota_us, nothing.cpu_period_us, nothing.vcpu) == (-1, 100000, None)
