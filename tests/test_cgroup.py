"""cgroup snapshots -> counters and per-role CPU, from a real cgroup v1 task and hand-written v2 samples."""

import json
from pathlib import Path

import pytest

from sidecar_bench import cgroup

FIXTURES = Path(__file__).parent / "fixtures" / "runner"


def snap(name: str) -> cgroup.TaskSnapshot:
    return cgroup.parse_snapshot((FIXTURES / name).read_text())


def test_v1_snapshot_of_a_real_task():
    before = snap("snapshot-v1-before.txt")
    assert before.counters == cgroup.CgroupCounters(
        source="cgroup-v1", nr_periods=4, nr_throttled=3, throttled_ns=308976848, usage_ns=124555381,
        period_us=100000, quota_us=25000, peak_memory_bytes=16232448, nr_bursts=0, burst_ns=0)
    assert before.roles == {"app": 10, "proxy": 11, "agent": 12}
    assert before.clk_tck == 100
    assert {p.comm for p in before.processes} >= {"entrypoint.sh", "app-go", "python3"}


def test_v1_deltas_over_a_throttled_window():
    delta = cgroup.counters_delta(snap("snapshot-v1-before.txt").counters, snap("snapshot-v1-after.txt").counters)
    assert delta == {"source": "cgroup-v1", "nr_periods": 23, "nr_throttled": 23,
                     "throttled_s": pytest.approx(3.50077979), "usage_s": pytest.approx(0.551086381),
                     "period_us": 100000, "quota_us": 25000, "nr_bursts": 0, "burst_s": 0.0}


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
    # (recorded before the snapshot read the knobs' files: burst, shares and cpuset are unknown)
    assert after.limits.as_dict() == {"cpu_quota_us": 25000, "cpu_period_us": 100000, "vcpu": 0.25,
                                      "memory_limit_bytes": 512 * 2**20, "swap_limit_bytes": 0,
                                      "cpu_burst_us": None, "cpu_shares": None, "cpu_weight": None,
                                      "cpuset_cpus": None}


def test_v2_limits_and_no_limit():
    assert snap("snapshot-v2-after.handwritten.txt").limits.as_dict() == {
        "cpu_quota_us": 25000, "cpu_period_us": 100000, "vcpu": 0.25, "memory_limit_bytes": 512 * 2**20,
        "swap_limit_bytes": 0, "cpu_burst_us": None, "cpu_shares": None, "cpu_weight": None, "cpuset_cpus": None}
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


def test_the_knobs_settings_and_burst_counters_read_back_on_v1_and_v2():
    v1 = cgroup.parse_limits({"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "1250\n", "/sys/fs/cgroup/cpu/cpu.cfs_period_us":
                              "5000\n", "/sys/fs/cgroup/cpu/cpu.cfs_burst_us": "625\n",
                              "/sys/fs/cgroup/cpu/cpu.shares": "1024\n", "/sys/fs/cgroup/cpuset/cpuset.cpus": "1\n"})
    assert (v1.vcpu, v1.cpu_burst_us, v1.cpu_shares, v1.cpuset_cpus) == (0.25, 625, 1024, "1")
    v2 = cgroup.parse_limits({"/sys/fs/cgroup/cpu.max": "max 100000\n", "/sys/fs/cgroup/cpu.max.burst": "0\n",
                              "/sys/fs/cgroup/cpu.weight": "39\n", "/sys/fs/cgroup/cpuset.cpus.effective": "0-1\n"})
    assert (v2.cpu_quota_us, v2.cpu_burst_us, v2.cpu_weight, v2.cpuset_cpus) == (-1, 0, 39, "0-1")
    stat = "usage_usec 10\nnr_periods 5\nnr_throttled 1\nthrottled_usec 7\nnr_bursts {}\nburst_usec {}\n"
    before = cgroup.parse_v2({"/sys/fs/cgroup/cpu.stat": stat.format(2, 300)})
    after = cgroup.parse_v2({"/sys/fs/cgroup/cpu.stat": stat.format(5, 1300)})
    delta = cgroup.counters_delta(before, after)
    assert (delta["nr_bursts"], delta["burst_s"]) == (3, pytest.approx(0.001))
    # A kernel without CFS burst reports neither: the delta has no burst keys (NaN in the summary).
    old = cgroup.parse_v2({"/sys/fs/cgroup/cpu.stat": "usage_usec 10\nnr_periods 5\n"})
    assert "nr_bursts" not in cgroup.counters_delta(old, old)
