"""The Docker label keys: spelled in labels.py only, and exactly as on the engines already (images are reused by
their inputs-digest label, leftovers are found by the project label, the lease by its own)."""

import re
from pathlib import Path

from sidecar_bench import containers, labels, lease, proxy, runner
from sidecar_bench.conditions import Condition

ROOT = Path(__file__).resolve().parents[1]


def test_a_runs_containers_carry_the_same_labels_as_before():
    condition = Condition("go", 0.5, 2048, 1, 5)
    assert containers.labels(condition, "abc123", "task") == {
        "org.sidecar-bench.project": "sidecar-bench",
        "org.sidecar-bench.condition": condition.id,
        "org.sidecar-bench.run": "abc123",
        "org.sidecar-bench.part": "task",
    }
    assert (
        runner.PROJECT_LABEL,
        runner.PROJECT,
        runner.CONDITION_LABEL,
        runner.RUN_LABEL,
        runner.PART_LABEL,
    ) == (
        "org.sidecar-bench.project",
        "sidecar-bench",
        "org.sidecar-bench.condition",
        "org.sidecar-bench.run",
        "org.sidecar-bench.part",
    )


def test_the_other_keys_are_the_same_as_before():
    assert labels.TASK_CGROUP_LABEL == "org.sidecar-bench.task-cgroup"
    assert (lease.LEASE_LABEL, lease.LABEL_PREFIX) == (
        "org.sidecar-bench.lease",
        "org.sidecar-bench.lease.",
    )
    assert (
        labels.VARIANT_LABEL,
        labels.INPUTS_DIGEST_LABEL,
        labels.BASE_IMAGE_LABEL,
        labels.NEXT_BUILD_NODE_LABEL,
        labels.IMAGE_HELPER_LABEL,
    ) == (
        "org.sidecar-bench.variant",
        "org.sidecar-bench.inputs-digest",
        "org.sidecar-bench.base-image",
        "org.sidecar-bench.next-build-node-version",
        "org.sidecar-bench.image-helper",
    )
    assert (proxy.VERSION_LABEL, proxy.CONFIG_DIGEST_LABEL) == (
        "org.sidecar-bench.haproxy-version",
        "org.sidecar-bench.haproxy-config-sha256",
    )


def test_the_dockerfiles_label_their_variant_with_the_same_key():
    dockerfiles = [
        ROOT / "task-image" / "Dockerfile",
        *sorted((ROOT / "task-image").glob("*/Dockerfile")),
    ]
    keys = {
        key
        for path in dockerfiles
        for key in re.findall(r"^LABEL (\S+)=", path.read_text(), flags=re.M)
    }
    assert keys == {labels.VARIANT_LABEL}, keys


def test_no_other_module_spells_a_label_key():
    spelled = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in ("scripts", "workflow")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path.name != "labels.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"""["']org\.sidecar-bench\.""", line)
    ]
    assert spelled == []
