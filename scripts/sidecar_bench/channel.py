"""The load generator's command channel: its steps (readiness, warm-up, hey, the reads around the window) run by a
process already in the container, sent over the container's attached stdin, their output read back from its
attached stdout and stderr, instead of one `docker exec` each.

An exec costs the engine a `runc exec` (a new process joining the container's namespaces and cgroup): 48-53 ms a
step on a 2-core VM, against 2.8-3.2 ms for the same command over this channel (15 each, twice). A run has two
such steps on its critical path (the readiness exec with its warm-up and reads, the window's hey with its reads).

The load generator's PID 1 is SERVER (bash), not the image's entrypoint: the image is unchanged, its digest still
decides reruns. What SERVER keeps of the watcher (containers.WATCH_SCRIPT), which it replaces here:
- the container ends when the runner's connection ends, even by kill -9, or at the deadline $1: a reader apart
  from the command loop reads stdin, and at its end signals PID 1, which exits (status 137) from its `wait` even
  while hey runs; the kernel then ends every process of the container, hey included;
- a command runs as an exec's would: its own process in the container's cgroup (hey's CPU counter reads the
  same file), its standard input /dev/null, its output and status returned.
A command is one line: the base64 of its arguments, each ended by a NUL (no quoting: an argument may hold any
byte but NUL). Its status follows its output on stdout, and a mark on stderr, so that both streams are read to
its end. Nothing else writes to the container's stdout (its command is `sleep` no more: the loop), and the
container logs nothing (log driver none): hey's CSV, up to 70 MB, passes through this channel, not the engine's
log files.
"""

from __future__ import annotations

import base64
import threading
from typing import Any

from docker.utils import socket as docker_socket

from .containers import ExecResult
from .failures import RunError

SERVER = r"""
deadline=$1
commands=/tmp/.sidecar-bench-commands
mkfifo "$commands" || exit 98
trap 'exit 137' USR1
# stdin goes to the reader alone (fd 3: a background command's own stdin would be /dev/null).
exec 3<&0 </dev/null
(
  end=$((SECONDS + deadline))
  while left=$((end - SECONDS)); [ "$left" -gt 0 ] && IFS= read -r -t "$left" line; do
    printf '%s\n' "$line"
  done > "$commands"
  # stdin ended or the deadline passed. A signal that comes just before PID 1's wait begins does not
  # interrupt it, so the signal is sent again every second until PID 1 has gone.
  while kill -USR1 "$$" 2>/dev/null; do sleep 1; done
) <&3 3<&- &
exec 3<&- 4<"$commands"
while IFS= read -r line <&4; do
  readarray -d '' -t argv < <(printf '%s' "$line" | base64 -d)
  "${argv[@]}" &
  wait $!
  status=$?
  echo "@@channel-done $status"
  echo "@@channel-done" >&2
done
# The commands' FIFO ends with its reader: stdin ended or the deadline passed.
exit 137
"""
NAME = "sidecar-bench-channel"
MARK = b"@@channel-done"
# How far back from a stream's end its mark is looked for (the mark, a status, a newline).
TAIL = 64


def entrypoint(deadline_s: int) -> list[str]:
    """The load generator's PID 1: SERVER, which ends at the deadline or with the runner's connection."""
    return ["bash", "-c", SERVER, NAME, str(deadline_s)]


def encode(cmd: list[str]) -> bytes:
    """One command's line: the base64 of its arguments, each ended by a NUL."""
    if not cmd or any("\0" in arg for arg in cmd):
        raise ValueError(f"not a command the channel can send: {cmd!r}")
    return base64.b64encode(b"".join(arg.encode() + b"\0" for arg in cmd)) + b"\n"


def _done(out: bytearray) -> bool:
    """Whether stdout ends with the mark and a status."""
    _, mark, tail = bytes(out[-TAIL:]).rpartition(MARK + b" ")
    return bool(mark) and tail.endswith(b"\n") and tail[:-1].isdigit()


class Channel:
    """The runner's end of the channel: the socket attached to the load generator's stdin, stdout and stderr."""

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.raw = getattr(sock, "_sock", sock)
        self.lock = threading.Lock()

    def run(self, cmd: list[str], timeout: float | None = None) -> ExecResult:
        """Run cmd in the load generator and wait: its status and output, as an exec's. RunError if the channel
        ends first (the container has ended or was removed)."""
        line = encode(cmd)
        with self.lock:
            try:
                if hasattr(self.raw, "settimeout"):
                    self.raw.settimeout(timeout)
                self.raw.sendall(line)
                out, err = bytearray(), bytearray()
                while not (_done(out) and err.endswith(MARK + b"\n")):
                    stream, size = docker_socket.next_frame_header(self.sock)
                    if size < 0:
                        raise RunError(
                            "the load generator's channel ended: the container has ended"
                        )
                    data = docker_socket.read_exactly(self.sock, size)
                    (err if stream == docker_socket.STDERR else out).extend(data)
            except (OSError, docker_socket.SocketError) as error:
                raise RunError(f"the load generator's channel failed: {error}") from error
        body, _, status = bytes(out).rpartition(MARK + b" ")
        errors = bytes(err)[: -len(MARK) - 1]
        return ExecResult(
            int(status), body.decode(errors="replace"), errors.decode(errors="replace")
        )
