"""Task image and load-generator image: inputs digest, build, apps, sidecars, entrypoint.

Docker tests use the real local engine. Images are ensured once per module (a no-op
when they are current); every container started here carries the label
org.sidecar-bench.test=image and is removed in a finalizer.
"""

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import hold_engine

from sidecar_bench import image

ROOT = Path(__file__).resolve().parents[1]
TEST_LABEL = {"org.sidecar-bench.test": "image"}
SIDECAR_ROLES = ["proxy", "agent", "log_router"]


# --- inputs digest (no Docker) ----------------------------------------------------------


@pytest.fixture
def task_dir(tmp_path):
    """A copy of task-image/ (without build products) that a test may edit."""
    copy = tmp_path / "task-image"
    shutil.copytree(
        image.TASK_IMAGE_DIR, copy, ignore=shutil.ignore_patterns("node_modules", ".next")
    )
    return copy


def _digests(root, base="debian:bookworm-slim"):
    return {v: image.inputs_digest(v, base, root) for v in image.VARIANTS}


def _changed(before, after):
    return sorted(v for v in before if before[v] != after[v])


def test_changing_the_sidecar_changes_only_sidecar_variants(task_dir):
    before = _digests(task_dir)
    with open(task_dir / "sidecar" / "sidecar.py", "a") as f:
        f.write("# a change\n")
    # The proxy variants hold the busy-loop sidecar too, for the roles after the proxy.
    assert _changed(before, _digests(task_dir)) == [
        "go-proxy",
        "go-sidecar",
        "next-proxy",
        "next-sidecar",
    ]


def test_changing_app_go_changes_only_go_variants(task_dir):
    before = _digests(task_dir)
    with open(task_dir / "app-go" / "main.go", "a") as f:
        f.write("// a change\n")
    assert _changed(before, _digests(task_dir)) == ["go", "go-proxy", "go-sidecar"]


def test_changing_app_next_source_changes_only_next_variants(task_dir):
    before = _digests(task_dir)
    with open(task_dir / "app-next" / "lib" / "work.js", "a") as f:
        f.write("// a change\n")
    assert _changed(before, _digests(task_dir)) == ["next", "next-proxy", "next-sidecar"]


def test_changing_the_open_loop_generator_changes_only_its_image(task_dir):
    # hey's image is an input of every closed-loop run: the open loop must never touch it.
    before = _digests(task_dir)
    with open(task_dir / "loadgen-open" / "main.go", "a") as f:
        f.write("// a change\n")
    assert _changed(before, _digests(task_dir)) == ["loadgen-open"]


def test_next_build_products_are_not_inputs(task_dir):
    before = _digests(task_dir)
    for generated in ("node_modules/next/index.js", ".next/BUILD_ID"):
        path = task_dir / "app-next" / generated
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("generated\n")
    assert _digests(task_dir) == before


def test_entrypoint_changes_task_variants_but_not_loadgen(task_dir):
    before = _digests(task_dir)
    with open(task_dir / "entrypoint.sh", "a") as f:
        f.write("# a change\n")
    assert _changed(before, _digests(task_dir)) == ["go", "go-sidecar", "next", "next-sidecar"]


def test_base_image_name_enters_the_digest(task_dir):
    assert image.inputs_digest("go", "debian:bookworm-slim", task_dir) != image.inputs_digest(
        "go", "sidecar-bench/debian-minbase:bookworm", task_dir
    )


def test_app_only_variants_do_not_depend_on_the_sidecar():
    def rel(variant):
        return {
            p.relative_to(image.TASK_IMAGE_DIR).as_posix() for p in image.variant_inputs(variant)
        }

    assert "sidecar/sidecar.py" not in rel("go") | rel("next")
    assert "sidecar/sidecar.py" in rel("go-sidecar") & rel("next-sidecar")
    assert {"Dockerfile", "entrypoint.sh", "app-go/main.go", "app-go/go.mod"} <= rel("go")
    assert {"app-next/package-lock.json", "app-next/pages/work.js"} <= rel("next")
    assert not any(p.startswith("app-go/") for p in rel("next"))
    assert rel("loadgen") == {"loadgen/Dockerfile"}
    assert rel("loadgen-open") == {
        "loadgen-open/Dockerfile",
        "loadgen-open/go.mod",
        "loadgen-open/main.go",
        "loadgen-open/main_test.go",
    }


def test_unknown_variant_is_a_clear_error():
    with pytest.raises(image.ImageError, match="'rust' is not one of"):
        image.inputs_digest("rust", "debian:bookworm-slim")


def test_pruned_dockerfile_keeps_only_the_stages_a_target_needs():
    text = (image.TASK_IMAGE_DIR / "Dockerfile").read_text()
    stages = lambda target: [  # noqa: E731
        line.split()[-1]
        for line in image.prune_dockerfile(text, target).splitlines()
        if line.startswith("FROM ")
    ]
    assert stages("go") == ["base", "go-build", "go"]
    assert stages("go-sidecar") == ["base", "go-build", "python-runtime", "go-sidecar"]
    assert stages("next") == ["base", "node-runtime", "next"]
    assert stages("next-sidecar") == ["base", "node-runtime", "node-python-runtime", "next-sidecar"]
    assert image.prune_dockerfile(text, "go").startswith(
        "# sidecar-bench task image"
    )  # global ARG kept


@pytest.mark.parametrize(
    "args, message",
    [
        (["--role", "router", "--load", "5"], "invalid choice: 'router'"),
        (["--role", "proxy", "--load", "-5"], "'-5' is not within 0..100"),
        (["--role", "proxy", "--load", "five"], "'five' is not a number"),
    ],
)
def test_sidecar_rejects_bad_arguments(args, message):
    proc = subprocess.run(
        [sys.executable, str(image.TASK_IMAGE_DIR / "sidecar" / "sidecar.py"), *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert message in proc.stderr


# --- Docker ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client():
    # Holds the engine's measurement lock: these tests start containers that burn CPU.
    yield from hold_engine("tests/test_image.py")


@pytest.fixture(scope="module")
def images(client):
    """Every variant and the load generator, ensured once (built only if out of date)."""
    base = image.ensure_base(client, "debian:bookworm-slim", "debootstrap")
    ids = {v: image.ensure_variant(client, v, base) for v in image.VARIANTS}
    return {"base": base, **ids}


@pytest.fixture
def containers(client):
    """Start labelled containers; all are removed at teardown."""
    started = []

    def start(img, **kwargs):
        labels = {**TEST_LABEL, **kwargs.pop("labels", {})}
        c = client.containers.run(img, detach=True, labels=labels, **kwargs)
        started.append(c)
        return c

    yield start
    for c in started:
        try:
            c.remove(force=True)
        except Exception:
            pass


def _wait_exit(container, timeout=20):
    result = container.wait(timeout=timeout)
    return result["StatusCode"]


def _fetch(containers, task, path, timeout_s=20, as_json=True):
    """GET http://127.0.0.1:8080<path> from a loadgen container in the task's network namespace."""
    script = (
        f"i=0; while [ $i -lt {timeout_s * 10} ]; do "
        f"curl -sf http://127.0.0.1:8080{path} && exit 0; i=$((i+1)); sleep 0.1; done; exit 1"
    )
    lg = containers(
        image.image_tag("loadgen"),
        command=["sh", "-c", script],
        network_mode=f"container:{task.id}",
    )
    status = _wait_exit(lg, timeout=timeout_s + 10)
    out = lg.logs(stdout=True, stderr=False).decode()
    assert status == 0, (
        f"GET {path} failed: {lg.logs().decode()}\ntask log:\n{task.logs().decode()}"
    )
    return json.loads(out) if as_json else out


def _read_roles(task, timeout_s=10):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        code, out = task.exec_run(["cat", "/run/sidecar-bench/roles"])
        if code == 0:
            return [
                (role, int(pid))
                for role, pid in (line.split() for line in out.decode().splitlines())
            ]
        time.sleep(0.1)
    raise AssertionError(f"no roles file after {timeout_s} s; log:\n{task.logs().decode()}")


def _cpu_ticks(task, pid):
    """utime + stime of a process from the kernel's accounting (/proc/PID/stat), in clock ticks."""
    code, out = task.exec_run(["cat", f"/proc/{pid}/stat"])
    assert code == 0, out
    fields = out.decode().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)


@pytest.mark.docker
def test_images_carry_variant_digest_and_version_labels(client, images):
    for variant in image.VARIANTS:
        labels = client.images.get(image.image_tag(variant)).labels
        assert labels["org.sidecar-bench.variant"] == variant
        assert labels["org.sidecar-bench.inputs-digest"] == image.inputs_digest(
            variant, images["base"]
        )
    versions = {v: image.image_versions(client, image.image_tag(v)) for v in image.VARIANTS}
    assert set(versions["go"]) == {"go"}
    assert set(versions["go-sidecar"]) == {"go", "python"}
    assert {"node", "next", "python"} <= set(versions["next-sidecar"])
    assert versions["next"]["next"] == "14.2.5"
    assert versions["loadgen"]["hey"].startswith("0.1.4")
    assert set(versions["loadgen-open"]) == {"go"}


@pytest.mark.docker
def test_go_work_answers_1229_and_stats_counts_it(containers, images):
    task = containers(image.image_tag("go"))
    assert _fetch(containers, task, "/work")["primes"] == 1229
    assert _fetch(containers, task, "/work")["primes"] == 1229
    assert _fetch(containers, task, "/stats") == {"served": 2}


@pytest.mark.docker
def test_next_work_is_an_ssr_page_that_answers_1229(containers, images):
    task = containers(image.image_tag("next"))
    for _ in range(2):
        assert '<span id="primes">1229</span>' in _fetch(containers, task, "/work", as_json=False)
    assert _fetch(containers, task, "/stats") == {"served": 2}


@pytest.mark.docker
@pytest.mark.parametrize("count", [0, 1, 2, 3])
def test_sidecar_count_starts_exactly_that_many_sidecars_with_roles(containers, images, count):
    task = containers(
        image.image_tag("go-sidecar"),
        environment={"SIDECAR_COUNT": str(count), "SIDECAR_LOAD": "2.5"},
    )
    roles = _read_roles(task)
    assert [role for role, _ in roles] == ["app"] + SIDECAR_ROLES[:count]
    for role, pid in roles:
        code, out = task.exec_run(["cat", f"/proc/{pid}/cmdline"])
        assert code == 0, f"{role} (pid {pid}) is not running"
        argv = out.decode().rstrip("\0").split("\0")
        expected = (
            ["/app/app-go"]
            if role == "app"
            else [
                "python3",
                "/sidecar/sidecar.py",
                "--role",
                role,
                "--load",
                "2.5",
                "--burn",
                "wall",
            ]
        )
        assert argv == expected
    # And no other sidecar runs: the engine's process list of the whole container.
    top = task.top()
    command = top["Titles"].index("CMD")
    assert sum("/sidecar/sidecar.py" in proc[command] for proc in top["Processes"]) == count


@pytest.mark.docker
@pytest.mark.parametrize("burn", ["wall", "cpu"])
def test_sidecar_burns_its_share_by_kernel_accounting(containers, images, burn):
    """15 % of one core over 5 s, from /proc/PID/stat (not the sidecar's own claim)."""
    task = containers(
        image.image_tag("go-sidecar"),
        environment={"SIDECAR_COUNT": "1", "SIDECAR_LOAD": "15", "SIDECAR_BURN": burn},
    )
    pid = dict(_read_roles(task))["proxy"]
    code, out = task.exec_run(["getconf", "CLK_TCK"])
    hz = int(out)
    time.sleep(0.5)  # past start-up (interpreter loading is not part of the share)
    shares = []
    for _ in range(2):  # a second window only if a busy neighbour disturbed the first
        t0, c0 = time.monotonic(), _cpu_ticks(task, pid)
        time.sleep(5)
        t1, c1 = time.monotonic(), _cpu_ticks(task, pid)
        shares.append(100 * (c1 - c0) / hz / (t1 - t0))
        if abs(shares[-1] - 15) <= 2:
            break
    assert abs(shares[-1] - 15) <= 2, f"sidecar used {shares} % of one core, target 15 %"


@pytest.mark.docker
@pytest.mark.parametrize(
    "env, message",
    [
        ({"APP_TYPE": "rust"}, "APP_TYPE='rust' is not one of: go, next"),
        ({"SIDECAR_COUNT": "7"}, "SIDECAR_COUNT='7' is not an integer in 0..3"),
        ({"SIDECAR_LOAD": "-5"}, "SIDECAR_LOAD='-5' is not a number in 0..100"),
        ({"APP_TYPE": "next"}, "APP_TYPE='next' but this image has no Next.js app"),
        ({"SIDECAR_BURN": "gpu"}, "SIDECAR_BURN='gpu' is not one of: wall, cpu"),
    ],
)
def test_bad_environment_fails_fast_with_its_message(containers, images, env, message):
    task = containers(image.image_tag("go-sidecar"), environment=env)
    # Fails before starting anything (no "started" line), on its own; the bound only catches a task that runs on.
    status = _wait_exit(task, timeout=60)
    logs = task.logs().decode()
    assert status != 0 and message in logs and "entrypoint: started" not in logs, logs


@pytest.mark.docker
@pytest.mark.parametrize("variant", ["go", "next"])
def test_app_only_variant_refuses_sidecars(containers, images, variant):
    task = containers(
        image.image_tag(variant), environment={"SIDECAR_COUNT": "2", "SIDECAR_LOAD": "5"}
    )
    assert _wait_exit(task, timeout=10) != 0
    assert "this image has no sidecar" in task.logs().decode()


@pytest.mark.docker
def test_sigterm_stops_everything_promptly(containers, images):
    task = containers(
        image.image_tag("go-sidecar"), environment={"SIDECAR_COUNT": "3", "SIDECAR_LOAD": "5"}
    )
    _read_roles(task)
    started = time.monotonic()
    task.stop(timeout=60)  # SIGKILL only after 60 s
    # Stopped by the SIGTERM, not the engine's SIGKILL: the app's status after SIGTERM, well before the kill.
    assert time.monotonic() - started < 60
    task.reload()
    assert task.attrs["State"]["ExitCode"] == 143
    assert "entrypoint: SIGTERM received, stopping" in task.logs().decode()


@pytest.mark.docker
def test_container_exits_with_the_apps_status_when_the_app_dies(containers, images):
    task = containers(
        image.image_tag("go-sidecar"), environment={"SIDECAR_COUNT": "2", "SIDECAR_LOAD": "5"}
    )
    app_pid = dict(_read_roles(task))["app"]
    code, out = task.exec_run(["bash", "-c", f"kill -KILL {app_pid}"])  # no procps: bash's builtin
    assert code == 0, out
    assert _wait_exit(task, timeout=10) == 128 + 9
    assert "app (pid" in task.logs().decode()


@pytest.mark.docker
def test_second_ensure_without_changes_builds_nothing(client, images, caplog):
    caplog.set_level("INFO", logger=image.log.name)
    for variant in ("go-sidecar", "next", "loadgen"):
        # The same image, no build step logged; a rebuild takes minutes, so 60 s only catches one unlogged.
        started = time.monotonic()
        assert image.ensure_variant(client, variant, images["base"]) == images[variant]
        assert time.monotonic() - started < 60
    assert "building" not in caplog.text and "next build:" not in caplog.text
    assert caplog.text.count("is up to date") == 3


@pytest.mark.docker
def test_failed_build_names_the_variant_and_shows_the_log_tail(client, images, task_dir):
    (task_dir / "app-go" / "main.go").write_text(
        "package main\n\nfunc main() { undefinedThing() }\n"
    )
    with pytest.raises(image.ImageError) as failure:
        image.build_variant(client, "go", images["base"], root=task_dir)
    message = str(failure.value)
    assert "build sidecar-bench/task:go failed" in message
    assert "undefined: undefinedThing" in message  # the compiler's words, from the log tail
    assert (
        client.images.get(image.image_tag("go")).id == images["go"]
    )  # the good image keeps its tag


@pytest.mark.docker
def test_missing_base_without_fallback_is_a_clear_error(client):
    with pytest.raises(
        image.ImageError,
        match="base image sidecar-bench/no-such-base:1: not present and cannot be pulled",
    ):
        image.ensure_base(client, "sidecar-bench/no-such-base:1", None)


def test_editing_only_the_next_stages_leaves_the_go_digests_alone(tmp_path):
    root = tmp_path / "task-image"
    shutil.copytree(
        image.TASK_IMAGE_DIR, root, ignore=shutil.ignore_patterns("node_modules", ".next")
    )
    before = {v: image.inputs_digest(v, "debian:bookworm-slim", root) for v in image.TASK_VARIANTS}
    dockerfile = root / "Dockerfile"
    dockerfile.write_text(
        dockerfile.read_text().replace(
            "FROM node-runtime AS next\n", "FROM node-runtime AS next\n# edited\n"
        )
    )
    after = {v: image.inputs_digest(v, "debian:bookworm-slim", root) for v in image.TASK_VARIANTS}
    assert [v for v in image.TASK_VARIANTS if before[v] != after[v]] == ["next"]
