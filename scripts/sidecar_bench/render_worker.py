"""A second process that draws charts: a chart's SVG from its Vega-Lite spec, then its PNG from that SVG.

Drawing holds the interpreter's lock (vl-convert does not release it), so a stage that writes several charts
draws them here while it makes the next chart's spec (chart_files.rendering_in_background), on a second core.
vl-convert's JavaScript engine starts (about 0.4 s here) as soon as the process does, while the stage still reads
its data.

    python -m sidecar_bench.render_worker

A stage starts it with Worker (chart_files.rendering_in_background does), or before its own heavy imports
with start() (then rendering_in_background takes that one).

Reads one JSON request a line on standard input: {"spec": <path of the spec's JSON>, "vl_version": ...,
"svg": <path or null>, "png": <path or null>, "scale": ..., "ppi": ...}. Writes each file whole or not at all
(a temporary name beside it, then a rename), and answers each request with one line, {"ok": true} or
{"error": "<what failed>"}, in the order of the requests. Ends at the end of its input (the stage has closed
it, or has died), removing the folder of specs it was given (SIDECAR_BENCH_SPECS). The module imports only the
standard library, so that importing it costs the stage nothing; the process imports vl-convert at once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

MODULE = "sidecar_bench.render_worker"
# The folder of the specs handed over (a temporary one a stage): the process removes it when its input ends,
# so that a stage killed with SIGKILL leaves none behind.
SPECS_PREFIX = "sidecar-bench-specs-"
SPECS_ENV = "SIDECAR_BENCH_SPECS"

# A chart small enough to start the JavaScript engine with.
WARM_UP_SPEC = {"data": {"values": [{"x": 0}]}, "mark": "point", "encoding": {"x": {"field": "x"}}}


def write_whole(path: str | Path, data: bytes) -> None:
    """data as the file at path, never a part of it: a temporary file beside it, then a rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def render(request: dict) -> None:
    """One request: the SVG from the spec, the PNG from that SVG, each written whole where asked."""
    import vl_convert

    # A dict, as the stage would hand it: vl-convert's own reading of JSON text rounds some numbers differently.
    spec = json.loads(Path(request["spec"]).read_text(encoding="utf-8"))
    svg = vl_convert.vegalite_to_svg(spec, vl_version=request["vl_version"])
    if request.get("svg"):
        write_whole(request["svg"], svg.encode("utf-8"))
    if request.get("png"):
        png = vl_convert.svg_to_png(svg, scale=request["scale"], ppi=request["ppi"])
        write_whole(request["png"], png)


def serve(lines, answer) -> None:
    """Each request line handled in turn, each answered (answer(dict)); a failed request does not end the loop."""
    for line in lines:
        if not line.strip():
            continue
        try:
            render(json.loads(line))
            answer({"ok": True})
        except Exception:  # the stage that asked raises it, with the chart's name
            answer({"error": traceback.format_exc(limit=3)})


def main() -> None:
    # Start the JavaScript engine before the first chart arrives (0.4 s here; with any Vega-Lite version, each
    # of which then loads in milliseconds: the chart's own comes with its request).
    import vl_convert

    vl_convert.vegalite_to_svg(WARM_UP_SPEC)

    def answer(message: dict) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    try:
        serve(sys.stdin, answer)
    finally:  # its input has ended: the stage is done with it, or has died without removing the specs
        specs = os.environ.get(SPECS_ENV, "")
        if Path(specs).name.startswith(SPECS_PREFIX):
            shutil.rmtree(specs, ignore_errors=True)


class Worker:
    """The stage's side: this module's process, the charts handed to it, and their answers."""

    def __init__(self):
        self.specs = Path(tempfile.mkdtemp(prefix=SPECS_PREFIX))
        self.errors = tempfile.TemporaryFile()
        path = os.environ.get("PYTHONPATH")
        env = {
            **os.environ,
            # this library, whichever checkout the stage imported it from
            "PYTHONPATH": str(Path(__file__).resolve().parents[1])
            + (os.pathsep + path if path else ""),
            SPECS_ENV: str(self.specs),
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", MODULE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            text=True,
            env=env,
        )
        self.asked: list[str] = []

    def draw(
        self,
        spec: dict,
        name: str,
        vl_version: str,
        svg: Path | None,
        png: Path | None,
        scale: float,
        ppi: float,
    ) -> None:
        """Hands the chart over and returns at once; finish() tells whether it was drawn."""
        spec_file = self.specs / f"{len(self.asked)}.json"
        spec_file.write_text(json.dumps(spec), encoding="utf-8")
        request = {
            "spec": str(spec_file),
            "vl_version": vl_version,
            "svg": str(svg) if svg else None,
            "png": str(png) if png else None,
            "scale": scale,
            "ppi": ppi,
        }
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            raise self._ended(f"before it could take {name}") from None
        self.asked.append(name)

    def finish(self) -> None:
        """Waits for every chart handed over; raises, naming each chart, if any was not drawn."""
        try:
            try:
                self.process.stdin.close()
            except BrokenPipeError:  # it has ended: the answers below tell what it drew
                pass
            failed = []
            for name in self.asked:
                line = self.process.stdout.readline()
                if not line:
                    raise self._ended(f"before it had drawn {name}")
                answer = json.loads(line)
                if "error" in answer:
                    failed.append(f"{name}: {answer['error']}")
            self.process.wait(timeout=60)
            if failed:
                raise RuntimeError("charts not drawn:\n" + "\n".join(failed))
        finally:
            self.abandon()

    def abandon(self) -> None:
        """Ends the process if it still runs and removes the specs handed to it."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            try:
                pipe.close()
            except OSError:  # what was left in the buffer has no reader: dropped
                pass
        self.errors.close()
        shutil.rmtree(self.specs, ignore_errors=True)

    def _ended(self, when: str) -> RuntimeError:
        self.process.wait(timeout=60)
        self.errors.seek(0)
        said = self.errors.read().decode("utf-8", "replace").strip()[-2000:]
        return RuntimeError(
            f"the chart-drawing process ended (exit status {self.process.returncode}) {when}"
            + (f": {said}" if said else "")
        )


_started: Worker | None = None


def start() -> None:
    """Starts the process now, for the stage's rendering_in_background to take: called before the stage's
    heavy imports, its engine starts while they run. Without a second CPU, nothing (the stage draws itself)."""
    global _started
    if _started is None and two_cpus():
        _started = Worker()


def take_started() -> Worker | None:
    """The process start() started, if it still runs (once: the caller owns it)."""
    global _started
    worker, _started = _started, None
    if worker is not None and worker.process.poll() is not None:
        worker.abandon()
        return None
    return worker


def two_cpus() -> bool:
    """Whether this process may run on two CPUs or more: else drawing beside it would only take turns."""
    try:
        return len(os.sched_getaffinity(0)) >= 2
    except AttributeError:  # not Linux
        return (os.cpu_count() or 1) >= 2


if __name__ == "__main__":
    main()
