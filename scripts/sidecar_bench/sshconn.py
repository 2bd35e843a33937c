"""Docker clients over ssh://: one SSH connection per process and address, shared by every client.

The Docker SDK's own ssh:// transport (paramiko) makes a new SSH connection for every
client, and a new connection pool, hence a new SSH session running `docker system
dial-stdio` on the engine's machine, for every distinct API path: a run job paid about
45 sessions (a process start each) and two SSH log-ins. Here:

- one paramiko connection per process and address (TCP_NODELAY), opened with the SDK's own
  reading of the user's SSH set-up (~/.ssh/config: HostName, Port, User, IdentityFile,
  ProxyCommand, and UserKnownHostsFile; the agent and the default keys; ~/.ssh/known_hosts
  and /etc/ssh/ssh_known_hosts; unknown or mismatched host keys refused, naming the host);
  it closes when the last client using it is closed, and with the process in any case
  (which is what ends the engine's lease after a kill);
- one HTTP connection pool per client for every path, so keep-alive works as on the local
  socket;
- each HTTP connection is a channel to the engine's socket on that machine (what `ssh -L
  local.sock:/var/run/docker.sock` opens), found once per SSH connection by asking the remote
  docker CLI which engine it talks to (`docker context inspect`, which honours the remote
  DOCKER_HOST and context, as dial-stdio does); where that is not a unix socket or the
  server refuses socket forwarding (AllowStreamLocalForwarding no, a `restrict` key), every
  HTTP connection runs `docker system dial-stdio` as the SDK does.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import socket
import threading
import time
import urllib.parse
from typing import Any

import docker
import docker.constants
import docker.errors
import paramiko
from docker.transport.basehttpadapter import BaseHTTPAdapter
from docker.transport.sshconn import SSHConnection, SSHConnectionPool

from .hosts import HostError

log = logging.getLogger(__name__)

# Read by OpenSSH beside ~/.ssh/known_hosts (the SDK's transport ignores it).
SYSTEM_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"
# How long opening the TCP connection to the SSH server may take.
CONNECT_TIMEOUT_S = 30.0
# How long the remote docker CLI may take to say which engine it talks to.
PROBE_TIMEOUT_S = 30.0
_PROBE = "docker context inspect --format '{{.Endpoints.docker.Host}}'"


class HostKeyError(HostError):
    """The engine's machine is unknown to known_hosts or shows another key than known_hosts has: never
    skipped as unreachable, the job stops with this message."""


class Connection:
    """One SSH connection to one ssh:// address, shared by this process's clients of it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.users = 0
        self.socket_path: str | None = None  # the engine's unix socket on that machine, once known
        self.forwarding = (
            True  # False once the server refused a socket channel: dial-stdio from then on
        )
        self._lock = threading.Lock()
        self.ssh, params = _paramiko_client(url)
        self.label = _known_hosts_name(params)
        try:
            if "sock" not in params:  # no ProxyCommand: our own TCP socket, without Nagle's delay
                params["sock"] = _tcp_socket(params["hostname"], params.get("port") or 22)
            self.ssh.connect(**params)
        except paramiko.BadHostKeyException as err:
            self.ssh.close()
            raise HostKeyError(
                f"{url}: the host key of {self.label} does not match known_hosts: it shows "
                f"{_fingerprint(err.key)}, known_hosts has {_fingerprint(err.expected_key)}. The machine was reinstalled or someone is in between: check its "
                f"key out of band, then replace the entry (ssh-keygen -R '{self.label}') and connect once with ssh"
            ) from None
        except paramiko.SSHException as err:
            self.ssh.close()
            if "not found in known_hosts" in str(err):
                raise HostKeyError(
                    f"{url}: {self.label} is not in known_hosts, so its host key cannot be checked: connect once "
                    f"with ssh ({_ssh_command(params)}), check the key it shows and accept it"
                ) from None
            raise
        except BaseException:
            self.ssh.close()
            if isinstance(params.get("sock"), socket.socket):
                params["sock"].close()
            raise
        self._probe()

    def _probe(self) -> None:
        """Which engine the remote docker CLI talks to: a unix socket is reached directly from then on."""
        try:
            _, stdout, _ = self.ssh.exec_command(_PROBE, timeout=PROBE_TIMEOUT_S)
            answer = stdout.read().decode(errors="replace").strip()
            status = stdout.channel.recv_exit_status()
        except (paramiko.SSHException, OSError) as err:
            log.info(
                "%s: asking the remote docker CLI for its engine failed (%s): dial-stdio for each connection",
                self.url,
                err,
            )
            return
        if status == 0 and answer.startswith("unix://"):
            self.socket_path = answer[len("unix://") :]
        else:
            log.info(
                "%s: the remote docker CLI talks to %r: dial-stdio for each connection",
                self.url,
                answer,
            )

    def channel(self, timeout: float | None) -> Any:
        """A new channel carrying one HTTP connection to the engine."""
        transport = self.ssh.get_transport()
        if transport is None or not transport.is_active():
            raise paramiko.SSHException(f"{self.url}: the SSH connection is closed")
        if self.socket_path and self.forwarding:
            try:
                channel = open_socket_channel(transport, self.socket_path, timeout)
            except paramiko.ChannelException as err:
                # Refused (forwarding disabled for this user or key) or the socket cannot be opened.
                self.forwarding = False
                log.info(
                    "%s: the SSH server refused a channel to %s (%s): dial-stdio for each connection",
                    self.url,
                    self.socket_path,
                    err,
                )
            else:
                channel.settimeout(timeout)
                return channel
        channel = transport.open_session()
        channel.settimeout(timeout)
        channel.exec_command("docker system dial-stdio")
        return channel

    def acquire(self) -> Connection:
        with self._lock:
            self.users += 1
        return self

    def release(self) -> None:
        with self._lock:
            self.users -= 1
            last = self.users <= 0
        if last:
            with _LOCK:
                if _CONNECTIONS.get(self.url) is self:
                    del _CONNECTIONS[self.url]
            self.ssh.close()


_CONNECTIONS: dict[str, Connection] = {}
_LOCK = threading.Lock()


def connection(url: str) -> Connection:
    """This process's connection to url, opened on first use (or again after it dropped)."""
    with _LOCK:
        existing = _CONNECTIONS.get(url)
        if existing is not None:
            transport = existing.ssh.get_transport()
            if transport is not None and transport.is_active():
                return existing.acquire()
        opened = Connection(url)
        _CONNECTIONS[url] = opened
        return opened.acquire()


class _Conn(SSHConnection):
    def __init__(self, shared: Connection, timeout: float) -> None:
        super().__init__(timeout=timeout)
        self.shared = shared

    def connect(self) -> None:
        self.sock = self.shared.channel(self.timeout)


class _Pool(SSHConnectionPool):
    def __init__(self, shared: Connection, timeout: float, maxsize: int) -> None:
        super().__init__(timeout=timeout, maxsize=maxsize)
        self.shared = shared

    def _new_conn(self) -> _Conn:
        return _Conn(self.shared, self.timeout)


class Adapter(BaseHTTPAdapter):
    """requests' transport for one client: one pool for every path, over the shared connection."""

    __attrs__ = BaseHTTPAdapter.__attrs__ + ["timeout", "max_pool_size"]

    def __init__(self, shared: Connection, timeout: float, max_pool_size: int) -> None:
        self.shared = shared
        self.timeout = timeout
        self.max_pool_size = max_pool_size
        self._pool: _Pool | None = None
        self._pool_lock = threading.Lock()
        self._closed = False
        super().__init__()

    def get_connection(self, url: str, proxies: Any = None) -> _Pool:
        with self._pool_lock:
            if self._pool is None:
                self._pool = _Pool(self.shared, self.timeout, self.max_pool_size)
            return self._pool

    def close(self) -> None:
        super().close()
        with self._pool_lock:
            pool, self._pool = self._pool, None
            closed, self._closed = self._closed, True
        if pool is not None:
            pool.close()
        if not closed:
            self.shared.release()


def client(url: str, timeout: float | None = None) -> docker.DockerClient:
    """A Docker client for an ssh:// address over this process's shared connection to it."""
    timeout = timeout or docker.constants.DEFAULT_TIMEOUT_SECONDS
    shared = connection(url)
    try:
        # A version given and use_ssh_client: the constructor neither connects nor asks the engine anything.
        api = docker.APIClient(
            base_url=url,
            version=docker.constants.MINIMUM_DOCKER_API_VERSION,
            use_ssh_client=True,
            timeout=timeout,
        )
        adapter = Adapter(shared, timeout, docker.constants.DEFAULT_MAX_POOL_SIZE)
    except BaseException:
        shared.release()
        raise
    api.mount("http+docker://ssh", adapter)
    api._custom_adapter = adapter
    try:
        api._version = api._retrieve_server_version()  # what the SDK does for version "auto"
    except BaseException:
        api.close()
        raise
    made = docker.DockerClient.__new__(docker.DockerClient)
    made.api = api
    return made


def _paramiko_client(url: str) -> tuple[paramiko.SSHClient, dict[str, Any]]:
    """A paramiko client and its connect() arguments for url, from ~/.ssh/config as the SDK reads it."""
    parsed = urllib.parse.urlparse(url)
    params: dict[str, Any] = {
        "hostname": parsed.hostname,
        "port": parsed.port,
        "username": parsed.username,
    }
    ssh = paramiko.SSHClient()
    known = []
    config_file = os.path.expanduser("~/.ssh/config")
    if os.path.exists(config_file):
        config = paramiko.SSHConfig.from_path(config_file)
        found = config.lookup(parsed.hostname)
        if "proxycommand" in found:
            params["sock"] = paramiko.ProxyCommand(found["proxycommand"])
        if "hostname" in found:
            params["hostname"] = found["hostname"]
        if parsed.port is None and "port" in found:
            params["port"] = int(found["port"])
        if parsed.username is None and "user" in found:
            params["username"] = found["user"]
        if "identityfile" in found:
            params["key_filename"] = found["identityfile"]
        known = [os.path.expanduser(path) for path in found.get("userknownhostsfile", "").split()]
    ssh.load_system_host_keys()
    for path in (SYSTEM_KNOWN_HOSTS, *known):
        if os.path.exists(path):
            ssh.load_host_keys(path)
    ssh.set_missing_host_key_policy(paramiko.RejectPolicy())
    return ssh, params


def _tcp_socket(hostname: str, port: int) -> socket.socket:
    """A TCP connection with TCP_NODELAY: every API call is a few small SSH packets each way, and with
    Nagle's algorithm against the peer's delayed ACK each waited ~40 ms (an exec took 0.16 s instead
    of 0.07 s over loopback)."""
    sock = socket.create_connection((hostname, port), timeout=CONNECT_TIMEOUT_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _fingerprint(key: paramiko.PKey) -> str:
    """`ssh-ed25519 SHA256:...`, as ssh shows a key (PKey.fingerprint is only in paramiko >= 3.2)."""
    digest = base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")
    return f"{key.get_name()} SHA256:{digest}"


def _known_hosts_name(params: dict[str, Any]) -> str:
    port = params.get("port")
    return params["hostname"] if port in (None, 22) else f"[{params['hostname']}]:{port}"


def _ssh_command(params: dict[str, Any]) -> str:
    user = f"{params['username']}@" if params.get("username") else ""
    port = f" -p {params['port']}" if params.get("port") not in (None, 22) else ""
    return f"ssh{port} {user}{params['hostname']}"


def open_socket_channel(
    transport: paramiko.Transport, path: str, timeout: float | None
) -> paramiko.Channel:
    """A channel to a unix socket on the server (OpenSSH's direct-streamlocal@openssh.com, `ssh -L x:/path`).

    paramiko opens direct-tcpip channels only; this is its open_channel with the streamlocal
    request's fields (socket path, reserved string, reserved uint32). Raises ChannelException when
    the server refuses it.
    """
    from paramiko.common import cMSG_CHANNEL_OPEN
    from paramiko.message import Message

    if not transport.active:
        raise paramiko.SSHException("SSH session not active")
    with transport.lock:
        window_size = transport._sanitize_window_size(None)
        max_packet_size = transport._sanitize_packet_size(None)
        chanid = transport._next_channel()
        message = Message()
        message.add_byte(cMSG_CHANNEL_OPEN)
        message.add_string("direct-streamlocal@openssh.com")
        message.add_int(chanid)
        message.add_int(window_size)
        message.add_int(max_packet_size)
        message.add_string(path)
        message.add_string("")
        message.add_int(0)
        channel = paramiko.Channel(chanid)
        transport._channels.put(chanid, channel)
        transport.channel_events[chanid] = event = threading.Event()
        transport.channels_seen[chanid] = True
        channel._set_transport(transport)
        channel._set_window(window_size, max_packet_size)
    transport._send_user_message(message)
    deadline = time.monotonic() + (timeout or 3600)
    while not event.wait(0.1):
        if not transport.active:
            raise transport.get_exception() or paramiko.SSHException("Unable to open channel.")
        if time.monotonic() > deadline:
            raise paramiko.SSHException("Timeout opening channel.")
    opened = transport._channels.get(chanid)
    if opened is not None:
        return opened
    raise transport.get_exception() or paramiko.SSHException("Unable to open channel.")
