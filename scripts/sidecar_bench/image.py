"""Build and ensure the task image variants and the load-generator image on a Docker host.

Everything goes through the Docker SDK (``docker.DockerClient``), with a build context
tarball assembled here, so the same calls work against a local or a remote engine:

- ``variant_inputs(variant)``: exactly the files a variant's build depends on.
- ``inputs_digest(variant, base_image)``: sha256 over those files and the base image name,
  stored on the image as the label ``org.sidecar-bench.inputs-digest``.
- ``ensure_base(client, base_image, fallback)``: the base image name to build on.
- ``build_next(app_dir, out_dir)``: ``npm ci && next build`` on the host (npm is not
  reachable from inside containers everywhere), only when the Next.js sources changed.
- ``build_variant`` / ``ensure_variant``: build (or keep, when the digest label matches)
  ``sidecar-bench/task:<variant>``, ``sidecar-bench/loadgen:latest`` (hey, the closed
  loop) or ``sidecar-bench/loadgen-open:latest`` (openloop, the open loop).

The Dockerfile has one target per variant. The classic builder (what the Engine API
runs without BuildKit) builds every stage before the target, so the context sent for a
variant carries a Dockerfile reduced to the stages that target needs; with BuildKit,
``docker build --target <variant>`` on the full Dockerfile gives the same image.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

import docker
import docker.errors

from .labels import (
    BASE_IMAGE_LABEL,
    IMAGE_HELPER_LABEL,
    INPUTS_DIGEST_LABEL,
    NEXT_BUILD_NODE_LABEL,
    VARIANT_LABEL,
)

# Every file of an image's versions folder becomes the label LABEL_PREFIX + its name.
from .labels import PREFIX as LABEL_PREFIX

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
TASK_IMAGE_DIR = REPO_ROOT / "task-image"
DEFAULT_NEXT_BUILD_DIR = REPO_ROOT / "results" / "build" / "next"

TASK_VARIANTS = ("go", "go-sidecar", "next", "next-sidecar")
# Variants with a real proxy (HAProxy) beside the busy-loop sidecars: their own images, so that the
# proxy's package and configuration are inputs of the conditions that use it and of no other.
PROXY_VARIANTS = ("go-proxy", "next-proxy")
PROXY_CONFIG = Path("proxy") / "haproxy.cfg"
# Their entrypoint: entrypoint.sh with the proxy's blocks, a file of its own so that the other
# variants' digests stay as they were.
PROXY_ENTRYPOINT = Path("proxy") / "entrypoint.sh"
LOADGEN = "loadgen"
# The open-loop generator: an image of its own, so that it never changes the hey image
# every closed-loop run depends on.
LOADGEN_OPEN = "loadgen-open"
LOADGEN_VARIANTS = (LOADGEN, LOADGEN_OPEN)
VARIANTS = TASK_VARIANTS + PROXY_VARIANTS + LOADGEN_VARIANTS

TASK_REPOSITORY = "sidecar-bench/task"
LOADGEN_REPOSITORY = "sidecar-bench/loadgen"
LOADGEN_TAG = "latest"
LOADGEN_OPEN_REPOSITORY = "sidecar-bench/loadgen-open"

VERSIONS_DIR = "/etc/sidecar-bench/versions"
DEBOOTSTRAP_TAG = "sidecar-bench/debian-minbase:bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"

# Directories of the Next.js app that are build products, never inputs.
_NEXT_GENERATED = {"node_modules", ".next", "out"}
_NEXT_BUILD_CONTEXT_DIR = "app-next-build"
_LOG_TAIL_LINES = 40
_TAR_MTIME = 1  # fixed, so equal contents give equal contexts


class ImageError(RuntimeError):
    """A task or load-generator image could not be made; the message says which and why."""


# --- names -----------------------------------------------------------------------------


def _check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise ImageError(f"image variant {variant!r} is not one of: {', '.join(VARIANTS)}")


def image_tag(variant: str) -> str:
    """The tag a variant gets on every host, e.g. ``sidecar-bench/task:go-sidecar``."""
    _check_variant(variant)
    if variant == LOADGEN:
        return f"{LOADGEN_REPOSITORY}:{LOADGEN_TAG}"
    if variant == LOADGEN_OPEN:
        return f"{LOADGEN_OPEN_REPOSITORY}:{LOADGEN_TAG}"
    return f"{TASK_REPOSITORY}:{variant}"


def _app_of(variant: str) -> str:
    return variant.split("-", 1)[0]


def _has_sidecar(variant: str) -> bool:
    return variant.endswith(("-sidecar", "-proxy"))


def _has_proxy(variant: str) -> bool:
    return variant in PROXY_VARIANTS


# --- inputs and digest -----------------------------------------------------------------


def _files_under(directory: Path, skip_dirs: Iterable[str] = ()) -> list[Path]:
    skip = set(skip_dirs)
    found = []
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames[:] = sorted(d for d in dirnames if d not in skip)
        found.extend(Path(dirpath) / name for name in sorted(filenames))
    return found


def _app_sources(root: Path, app: str) -> list[Path]:
    if app == "go":
        return _files_under(root / "app-go")
    return _files_under(root / "app-next", skip_dirs=_NEXT_GENERATED)


def variant_inputs(variant: str, root: Path | None = None) -> list[Path]:
    """Exactly the files whose content a variant's image depends on (sorted paths).

    Task variants: Dockerfile, entrypoint.sh, their app's sources (for next: the source
    files, not node_modules/.next) and, for ``-sidecar`` and ``-proxy`` variants only,
    sidecar/sidecar.py; ``-proxy`` variants have proxy/haproxy.cfg and proxy/entrypoint.sh in place
    of entrypoint.sh.
    The load generators: every file of their directory (loadgen/: the Dockerfile;
    loadgen-open/: the Dockerfile and the generator's Go sources and tests).
    """
    _check_variant(variant)
    root = Path(root) if root is not None else TASK_IMAGE_DIR
    if variant == LOADGEN:
        files = [root / "loadgen" / "Dockerfile"]
    elif variant == LOADGEN_OPEN:
        files = _files_under(root / LOADGEN_OPEN) or [root / LOADGEN_OPEN / "Dockerfile"]
    else:
        files = [root / "Dockerfile", root / "entrypoint.sh", *_app_sources(root, _app_of(variant))]
        if _has_sidecar(variant):
            files.append(root / "sidecar" / "sidecar.py")
        if _has_proxy(variant):
            files.remove(root / "entrypoint.sh")
            files += [root / PROXY_CONFIG, root / PROXY_ENTRYPOINT]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise ImageError(f"image {variant}: input file(s) missing: {', '.join(missing)}")
    return sorted(files)


def _digest_files(files: Iterable[Path], root: Path, extra: Iterable[tuple[str, str]] = ()) -> str:
    h = hashlib.sha256()
    for key, value in extra:
        h.update(f"{key}\0{value}\0".encode())
    for path in sorted(files):
        data = path.read_bytes()
        h.update(f"{path.relative_to(root).as_posix()}\0{len(data)}\0".encode())
        h.update(data)
    return "sha256:" + h.hexdigest()


def inputs_digest(variant: str, base_image: str, root: Path | None = None) -> str:
    """sha256 over the variant name, the base image name and the inputs' relative paths and contents.

    A task variant's Dockerfile counts only as far as the variant is built from it (the
    stages its target needs), so editing the Next.js stages does not touch the Go variants.
    """
    root = Path(root) if root is not None else TASK_IMAGE_DIR
    files = variant_inputs(variant, root)
    extra = [("variant", variant), ("base_image", base_image)]
    if variant not in LOADGEN_VARIANTS:
        dockerfile = root / "Dockerfile"
        files = [f for f in files if f != dockerfile]
        extra.append(("Dockerfile", prune_dockerfile(dockerfile.read_text(), variant)))
    return _digest_files(files, root, extra=extra)


# --- base image ------------------------------------------------------------------------


def _image_present(client: docker.DockerClient, name: str) -> bool:
    try:
        client.images.get(name)
        return True
    except docker.errors.ImageNotFound:
        return False


def ensure_base(
    client: docker.DockerClient,
    base_image: str,
    fallback: str | None = "debootstrap",
    *,
    fallback_tag: str = DEBOOTSTRAP_TAG,
    mirror: str = DEBIAN_MIRROR,
) -> str:
    """Return the name of a base image present on the engine, making one if needed.

    Uses ``base_image`` if present, else pulls it; if that fails and ``fallback`` is
    ``"debootstrap"``, uses ``fallback_tag`` if present or makes it with debootstrap on
    this machine (root needed) and imports it into the engine. The name returned is the
    one actually used (and the one that enters the inputs digest).
    """
    if _image_present(client, base_image):
        return base_image
    try:
        log.info("base image %s not present; pulling it", base_image)
        client.images.pull(base_image)
        return base_image
    except docker.errors.APIError as exc:
        pull_error = exc
    if fallback in (None, "", "none"):
        raise ImageError(
            f"base image {base_image}: not present and cannot be pulled ({pull_error}); "
            "set the image base to a local image or enable the debootstrap fallback"
        )
    if fallback != "debootstrap":
        raise ImageError(f"base image fallback {fallback!r} is not one of: debootstrap, none")
    log.info("cannot pull %s (%s); falling back to %s", base_image, pull_error, fallback_tag)
    if not _image_present(client, fallback_tag):
        make_debootstrap_base(client, fallback_tag, mirror=mirror)
    return fallback_tag


def make_debootstrap_base(
    client: docker.DockerClient,
    tag: str = DEBOOTSTRAP_TAG,
    *,
    suite: str = "bookworm",
    mirror: str = DEBIAN_MIRROR,
) -> str:
    """debootstrap --variant=minbase SUITE on this machine and import it into the engine as ``tag``."""
    if shutil.which("debootstrap") is None:
        raise ImageError(
            f"base image {tag}: debootstrap is not installed (apt-get install debootstrap)"
        )
    if os.geteuid() != 0:
        raise ImageError(
            f"base image {tag}: debootstrap needs root on the machine running the workflow"
        )
    repository, _, image_tag_ = tag.rpartition(":")
    with tempfile.TemporaryDirectory(prefix="sidecar-bench-debootstrap-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        tarball = Path(tmp) / "rootfs.tar"
        log.info("debootstrap --variant=minbase %s from %s (about a minute)", suite, mirror)
        _run(
            ["debootstrap", "--variant=minbase", suite, str(rootfs), mirror],
            what=f"base image {tag}: debootstrap",
        )
        _run(
            ["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(tarball), "."],
            what=f"base image {tag}: tar",
        )
        client.api.import_image_from_file(
            str(tarball), repository=repository, tag=image_tag_, changes=['CMD ["bash"]']
        )
    if not _image_present(client, tag):
        raise ImageError(
            f"base image {tag}: import finished but the engine does not list the image"
        )
    return tag


# --- Next.js build on the host ---------------------------------------------------------


def _run(args: list[str], *, what: str, cwd: Path | None = None, env: dict | None = None) -> None:
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    for line in (proc.stdout + proc.stderr).splitlines():
        log.debug("%s: %s", args[0], line)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-_LOG_TAIL_LINES:])
        raise ImageError(
            f"{what}: {' '.join(args)} exited with status {proc.returncode}; last output:\n{tail}"
        )


def _host_node_version() -> str:
    try:
        out = subprocess.run(
            ["node", "--version"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ImageError(
            f"next build: Node.js is needed on this machine to build the Next.js app ({exc})"
        ) from exc
    return out.strip().lstrip("v")


def build_next(app_dir: Path, out_dir: Path) -> Path:
    """Run ``npm ci`` and ``next build`` on the host; return the ready-to-copy standalone dir.

    The sources are copied to ``out_dir/work`` (so the source tree gets no node_modules),
    and the standalone server plus ``.next/static`` (and ``public/``) are assembled in
    ``out_dir/standalone``. Nothing runs when the sources and host Node.js version are
    those of the last build; ``npm ci`` runs only when package-lock.json changed.
    """
    app_dir, out_dir = Path(app_dir).resolve(), Path(out_dir).resolve()
    sources = _files_under(app_dir, skip_dirs=_NEXT_GENERATED)
    if not (app_dir / "package-lock.json").is_file():
        raise ImageError(
            f"next build: {app_dir}/package-lock.json is missing (commit it; npm ci needs it)"
        )
    node_version = _host_node_version()
    digest = _digest_files(sources, app_dir, extra=[("node", node_version)])
    lock_digest = _digest_files(
        [app_dir / "package-lock.json"], app_dir, extra=[("node", node_version)]
    )
    work, standalone = out_dir / "work", out_dir / "standalone"
    stamp, lock_stamp = out_dir / "sources.sha256", out_dir / "lock.sha256"

    if _read(stamp) == digest and (standalone / "server.js").is_file():
        log.info("next build: %s is up to date (%s)", standalone, digest[:19])
        return standalone

    # Copy the sources into the work dir, dropping files that no longer exist there.
    work.mkdir(parents=True, exist_ok=True)
    wanted = {p.relative_to(app_dir) for p in sources}
    for old in _files_under(work, skip_dirs=_NEXT_GENERATED):
        if old.relative_to(work) not in wanted:
            old.unlink()
    for rel in sorted(wanted):
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(app_dir / rel, work / rel)

    env = {**os.environ, "NEXT_TELEMETRY_DISABLED": "1", "NODE_ENV": "production"}
    if _read(lock_stamp) != lock_digest or not (work / "node_modules" / "next").is_dir():
        log.info("next build: npm ci in %s", work)
        # NODE_ENV=production would make npm skip devDependencies; the build needs them all.
        _run(
            ["npm", "ci", "--no-audit", "--no-fund", "--include=dev"],
            what="next build: npm ci",
            cwd=work,
            env={**env, "NODE_ENV": "development"},
        )
        lock_stamp.write_text(lock_digest)
    shutil.rmtree(work / ".next", ignore_errors=True)
    log.info("next build: next build in %s", work)
    _run(
        ["node", "node_modules/next/dist/bin/next", "build"],
        what="next build: next build",
        cwd=work,
        env=env,
    )

    tmp = out_dir / "standalone.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(work / ".next" / "standalone", tmp, symlinks=True)
    shutil.copytree(work / ".next" / "static", tmp / ".next" / "static", symlinks=True)
    if (work / "public").is_dir():
        shutil.copytree(work / "public", tmp / "public", symlinks=True)
    shutil.rmtree(standalone, ignore_errors=True)
    tmp.rename(standalone)
    stamp.write_text(digest)
    return standalone


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


# --- Dockerfile and build context -----------------------------------------------------

_FROM_RE = re.compile(r"^FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?\s*$", re.IGNORECASE)
_COPY_FROM_RE = re.compile(r"--from=(\S+)", re.IGNORECASE)


def prune_dockerfile(text: str, target: str) -> str:
    """The Dockerfile reduced to the stages ``target`` needs (BuildKit's behaviour, for the classic builder)."""
    preamble: list[str] = []
    stages: list[tuple[str | None, str, list[str]]] = []  # (name, parent, lines)
    for line in text.splitlines(keepends=True):
        match = _FROM_RE.match(line.strip())
        if match:
            stages.append((match.group(2), match.group(1), [line]))
        elif stages:
            stages[-1][2].append(line)
        else:
            preamble.append(line)
    by_name = {name.lower(): (name, parent, lines) for name, parent, lines in stages if name}
    if target.lower() not in by_name:
        raise ImageError(
            f"Dockerfile: no stage named {target!r} (stages: {', '.join(n for n, _, _ in stages if n)})"
        )
    needed: set[str] = set()
    todo = [target.lower()]
    while todo:
        name = todo.pop()
        if name in needed:
            continue
        needed.add(name)
        _, parent, lines = by_name[name]
        refs = [parent] + _COPY_FROM_RE.findall("".join(lines))
        todo.extend(ref.lower() for ref in refs if ref.lower() in by_name)
    kept = [line for name, _, lines in stages if name and name.lower() in needed for line in lines]
    return "".join(preamble + kept)


class _Context:
    """A deterministic build context tarball (fixed mtimes and owners)."""

    def __init__(self) -> None:
        self.file = tempfile.TemporaryFile()
        self.tar = tarfile.open(fileobj=self.file, mode="w", format=tarfile.PAX_FORMAT)

    def add_bytes(self, arcname: str, data: bytes, mode: int = 0o644) -> None:
        info = tarfile.TarInfo(arcname)
        info.size, info.mode, info.mtime = len(data), mode, _TAR_MTIME
        self.tar.addfile(info, io.BytesIO(data))

    def add_path(self, arcname: str, path: Path) -> None:
        info = self.tar.gettarinfo(str(path), arcname)
        info.mtime, info.uid, info.gid, info.uname, info.gname = _TAR_MTIME, 0, 0, "", ""
        if info.isreg():
            with open(path, "rb") as f:
                self.tar.addfile(info, f)
        else:
            self.tar.addfile(info)

    def add_tree(self, arcname: str, directory: Path) -> None:
        self.add_path(arcname, directory)
        for dirpath, dirnames, filenames in os.walk(directory):
            dirnames.sort()
            for name in dirnames + sorted(filenames):
                path = Path(dirpath) / name
                self.add_path(f"{arcname}/{path.relative_to(directory).as_posix()}", path)

    def finish(self):
        self.tar.close()
        self.file.seek(0)
        return self.file


def _task_context(variant: str, root: Path, next_standalone: Path | None):
    ctx = _Context()
    dockerfile = (root / "Dockerfile").read_text()
    ctx.add_bytes("Dockerfile", prune_dockerfile(dockerfile, variant).encode())
    for path in variant_inputs(variant, root):
        rel = path.relative_to(root).as_posix()
        if rel != "Dockerfile" and not rel.startswith("app-next/"):
            ctx.add_path(rel, path)
    if next_standalone is not None:
        ctx.add_tree(_NEXT_BUILD_CONTEXT_DIR, next_standalone)
    return ctx.finish()


def _loadgen_context(variant: str, root: Path):
    """A load generator's own directory is its context: exactly its inputs."""
    ctx = _Context()
    for path in variant_inputs(variant, root):
        ctx.add_path(path.relative_to(root / variant).as_posix(), path)
    return ctx.finish()


# --- building --------------------------------------------------------------------------


# The network of build steps: the engine's default bridge (see _stream_build).
BUILD_NETWORK = "bridge"


def _stream_build(client: docker.DockerClient, what: str, **kwargs) -> str:
    """Run one build through the Engine API; return the image id or raise with the log tail."""
    lines: list[str] = []
    image_id = None
    try:
        # Build steps (apt-get from Debian's mirror) run on the engine's default bridge
        # network: a network namespace of their own with NAT to the outside, never the
        # host's network, so that no build step sees the host's interfaces or reaches a
        # service listening on the host's loopback. An engine without a bridge that reaches
        # the mirror (dockerd --bridge=none, or --ip-masq=false) cannot build: load the
        # images and their base into it instead (docker save | docker load; their labels keep
        # them current).
        for msg in client.api.build(
            decode=True, rm=True, forcerm=True, network_mode=BUILD_NETWORK, **kwargs
        ):
            if "stream" in msg:
                for line in msg["stream"].splitlines():
                    if line.strip():
                        lines.append(line)
                        log.debug("build %s: %s", what, line)
            if "aux" in msg and isinstance(msg["aux"], dict) and "ID" in msg["aux"]:
                image_id = msg["aux"]["ID"]
            if "error" in msg:
                lines.append(msg["error"])
                raise ImageError(
                    f"build {what} failed: {msg['error'].strip()}; last build output:\n"
                    + _tail(lines)
                )
    except docker.errors.APIError as exc:
        raise ImageError(
            f"build {what} failed: {exc}; last build output:\n" + _tail(lines)
        ) from exc
    if image_id is None:
        match = next(
            (
                re.match(r"Successfully built (\w+)", line)
                for line in reversed(lines)
                if "Successfully built" in line
            ),
            None,
        )
        if match is None:
            raise ImageError(
                f"build {what}: the engine reported no image id; last build output:\n"
                + _tail(lines)
            )
        image_id = client.images.get(match.group(1)).id
    return image_id


def _tail(lines: list[str]) -> str:
    return "\n".join(lines[-_LOG_TAIL_LINES:])


def read_version_files(client: docker.DockerClient, image_id: str) -> dict[str, str]:
    """The ``/etc/sidecar-bench/versions/*`` files of an image (name -> version), read without running it."""
    try:
        container = client.containers.create(image_id, labels={IMAGE_HELPER_LABEL: "versions"})
        try:
            stream, _ = container.get_archive(VERSIONS_DIR)
            buf = io.BytesIO(b"".join(stream))
        finally:
            container.remove(force=True)
    except docker.errors.APIError as exc:
        raise ImageError(f"image {image_id[:19]}: cannot read {VERSIONS_DIR} ({exc})") from exc
    versions = {}
    with tarfile.open(fileobj=buf) as tar:
        for member in tar.getmembers():
            if member.isreg():
                versions[Path(member.name).name] = tar.extractfile(member).read().decode().strip()
    return dict(sorted(versions.items()))


def image_versions(client: docker.DockerClient, image: str) -> dict[str, str]:
    """Versions recorded as labels on an image, e.g. {"go": "1.19.8", "python": "3.11.2"}."""
    labels = client.images.get(image).labels or {}
    return {
        key[len(LABEL_PREFIX) : -len("-version")]: value
        for key, value in sorted(labels.items())
        if key.startswith(LABEL_PREFIX) and key.endswith("-version")
    }


def build_variant(
    client: docker.DockerClient,
    variant: str,
    base_image: str,
    *,
    root: Path | None = None,
    next_build_dir: Path | None = None,
    nocache: bool = False,
) -> str:
    """Build ``variant`` on the engine behind ``client`` on top of ``base_image``; return the image id.

    The image is tagged ``image_tag(variant)`` and labelled with the variant, the inputs
    digest, the base image and the versions of Go, Node.js, Next.js, Python (or hey).
    ``base_image`` must be present on the engine (see ``ensure_base``). ``nocache``
    rebuilds every layer (for timing a cold build; the Next.js host build is kept).
    """
    _check_variant(variant)
    root = Path(root) if root is not None else TASK_IMAGE_DIR
    digest = inputs_digest(variant, base_image, root)
    tag = image_tag(variant)
    labels = {VARIANT_LABEL: variant, INPUTS_DIGEST_LABEL: digest, BASE_IMAGE_LABEL: base_image}
    started = time.monotonic()
    log.info("building %s from %s (inputs %s)", tag, base_image, digest[:19])
    if variant in LOADGEN_VARIANTS:
        context = _loadgen_context(variant, root)
    else:
        standalone = None
        if _app_of(variant) == "next":
            standalone = build_next(
                root / "app-next", Path(next_build_dir or DEFAULT_NEXT_BUILD_DIR)
            )
            labels[NEXT_BUILD_NODE_LABEL] = _host_node_version()
        context = _task_context(variant, root, standalone)
    with context:
        built = _stream_build(
            client,
            tag,
            fileobj=context,
            custom_context=True,
            target=None if variant in LOADGEN_VARIANTS else variant,
            buildargs={"BASE_IMAGE": base_image},
            labels=labels,
            pull=False,
            nocache=nocache,
        )
    # Versions are known only once the packages are installed: read them from the image
    # and add them as labels in a one-line build on top (no new layer).
    versions = read_version_files(client, built)
    labels.update({f"{LABEL_PREFIX}{name}": value for name, value in versions.items()})
    ctx = _Context()
    ctx.add_bytes("Dockerfile", f"FROM {built}\n".encode())
    with ctx.finish() as context:
        image_id = _stream_build(
            client, f"{tag} (labels)", fileobj=context, custom_context=True, labels=labels
        )
    repository, _, name = tag.rpartition(":")
    if not client.api.tag(image_id, repository, name, force=True):
        raise ImageError(f"build {tag}: tagging {image_id} failed")
    log.info(
        "built %s = %s in %.1f s; versions %s",
        tag,
        image_id[:19],
        time.monotonic() - started,
        versions,
    )
    return image_id


def current_image(
    client: docker.DockerClient, variant: str, base_image: str, root: Path | None = None
) -> str | None:
    """The id of ``image_tag(variant)`` if it exists and was built from the current inputs, else None."""
    try:
        image = client.images.get(image_tag(variant))
    except docker.errors.ImageNotFound:
        return None
    if (image.labels or {}).get(INPUTS_DIGEST_LABEL) != inputs_digest(variant, base_image, root):
        return None
    return image.id


def ensure_variant(
    client: docker.DockerClient,
    variant: str,
    base_image: str,
    *,
    root: Path | None = None,
    next_build_dir: Path | None = None,
) -> str:
    """Return the id of an up-to-date ``image_tag(variant)``, building it only if needed.

    No-op (no Next.js build, no Docker build) when an image with that tag carries the
    current inputs digest label.
    """
    image_id = current_image(client, variant, base_image, root)
    if image_id is not None:
        log.info("%s is up to date (%s)", image_tag(variant), image_id[:19])
        return image_id
    return build_variant(client, variant, base_image, root=root, next_build_dir=next_build_dir)


def describe(
    variant: str,
    base_image: str,
    image_ids: dict[str, str],
    versions: dict[str, str],
    root: Path | None = None,
) -> dict:
    """The build reference written by the build_image rule (see workflow/scripts/build_image.py); root: the
    task-image folder the image was built from (default: the one beside this package)."""
    return {
        "variant": variant,
        "tag": image_tag(variant),
        "inputs_digest": inputs_digest(variant, base_image, root),
        "base_image": base_image,
        "hosts": dict(image_ids),
        "versions": dict(versions),
    }


def write_json_atomic(path: Path, value: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(value, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
