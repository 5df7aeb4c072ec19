"""A real three-node Weir cluster for the tests, and a TCP proxy that can cut a client off.

The cluster is the ``weir`` binary (``WEIR_BIN``, default ``../../target/debug/weir``
relative to ``clients/python``) run as ``weir serve --config nodeN.toml``, each node with
configs written here: ports picked here, data, logs and (for TLS) certificates from
``weir certs init`` in one temporary directory. Every wait is bounded; every process is
killed at teardown (and at interpreter exit, should teardown not run).

Ports: a node's ports go into its config before it starts, so they cannot be the kernel's
pick at bind time. A port found by binding port 0 and closing it is from the kernel's
*ephemeral* range, where the kernel may hand it to an outgoing connection as its source
port before the node binds it (the Rust launcher met exactly that in CI:
``crates/weir-launcher/src/ports.rs``). So, like the launcher, :func:`free_port` takes ports *below*
the ephemeral range (read from ``/proc``), checks each by binding it on 127.0.0.1, and
never hands out the same one twice in a process; processes start at offsets from their pid.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import hashlib
import itertools
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent

#: How long a cluster may take to elect its first leader and serve (s): a debug build on a
#: loaded two-core machine needs a few seconds.
READY_WAIT = 60.0
#: How often waits look again (s).
POLL = 0.1


def weir_bin() -> Path:
    """The ``weir`` binary the tests run."""
    path = os.environ.get("WEIR_BIN") or str(PACKAGE / ".." / ".." / "target" / "debug" / "weir")
    return Path(path).resolve()


# -- ports -------------------------------------------------------------------------------

_PORT_MIN = 20_000


def _ephemeral_start() -> int:
    try:
        lo = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        lo = 32_768
    return lo


def _port_space() -> range:
    lo = _ephemeral_start()
    if lo - _PORT_MIN >= 1_024:
        return range(_PORT_MIN, lo)
    return range(_PORT_MIN, 32_768)


_SPACE = _port_space()
_NEXT = itertools.count((os.getpid() * 997) % len(_SPACE))
_PORT_LOCK = threading.Lock()


def free_port() -> int:
    """A port on 127.0.0.1 outside the ephemeral range, bindable now (module doc)."""
    with _PORT_LOCK:
        for _ in range(len(_SPACE)):
            port = _SPACE[next(_NEXT) % len(_SPACE)]
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    raise RuntimeError("no free port on 127.0.0.1")


# -- processes ---------------------------------------------------------------------------

_LIVE: set[subprocess.Popen[bytes]] = set()


def _kill_all_at_exit() -> None:
    for p in list(_LIVE):
        _kill(p)


atexit.register(_kill_all_at_exit)


def _kill(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        try:
            os.kill(p.pid, signal.SIGCONT)
            os.kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=10)
    _LIVE.discard(p)


@dataclass
class NodeProc:
    id: int
    client_port: int
    peer_port: int
    http_port: int
    config: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False

    @property
    def http(self) -> str:
        return f"127.0.0.1:{self.http_port}"


def toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass
class Cluster:
    """Node processes in one directory (module doc)."""

    weir: Path
    dir: Path
    tls: bool = False
    #: secret -> role, written as ``[[tokens]]``.
    tokens: dict[str, str] = field(default_factory=dict)
    nodes: list[NodeProc] = field(default_factory=list)
    #: Top-level TOML lines laid into every node's config (``groups = 2``).
    extra: list[str] = field(default_factory=list)

    # the client's view

    @property
    def ca(self) -> str | None:
        return str(self.dir / "certs" / "ca.pem") if self.tls else None

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def servers(self) -> list[str]:
        """Every node's HTTP address, in id order."""
        return [n.http for n in self.nodes]

    def url(self, node_id: int) -> str:
        return f"{self.scheme}://{self.node(node_id).http}"

    def node(self, node_id: int) -> NodeProc:
        return self.nodes[node_id - 1]

    def admin_token(self) -> str | None:
        for secret, role in self.tokens.items():
            if role == "admin":
                return secret
        return None

    def http_client(self, token: str | None = None, timeout: float = 5.0) -> httpx.Client:
        headers = {}
        token = token or self.admin_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        verify: bool | str = True
        if self.tls:
            import ssl

            verify_ctx = ssl.create_default_context(cafile=self.ca)
            return httpx.Client(verify=verify_ctx, headers=headers, timeout=timeout,
                                trust_env=False)
        return httpx.Client(verify=verify, headers=headers, timeout=timeout, trust_env=False)

    # configuration

    def write_configs(self, n: int = 3) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.tls:
            subprocess.run(
                [str(self.weir), "certs", "init", str(self.dir / "certs")],
                check=True, capture_output=True, timeout=60,
            )
        for i in range(1, n + 1):
            self.nodes.append(NodeProc(
                id=i, client_port=free_port(), peer_port=free_port(), http_port=free_port(),
                config=self.dir / f"node{i}.toml", log=self.dir / f"node{i}.log",
            ))
        for node in self.nodes:
            lines = [
                f"id = {node.id}",
                f"data_dir = {toml_str(str(self.dir / f'data{node.id}'))}",
                f'client_addr = "127.0.0.1:{node.client_port}"',
                f'peer_addr = "127.0.0.1:{node.peer_port}"',
                f'http_listen = "127.0.0.1:{node.http_port}"',
                *self.extra,
                "",
            ]
            if self.tls:
                certs = self.dir / "certs"
                lines += [
                    "[tls]",
                    f"cert = {toml_str(str(certs / f'node{node.id}.pem'))}",
                    f"key = {toml_str(str(certs / f'node{node.id}.key'))}",
                    f"ca = {toml_str(str(certs / 'ca.pem'))}",
                    "",
                ]
            for secret, role in self.tokens.items():
                digest = hashlib.sha256(secret.encode()).hexdigest()
                lines += ["[[tokens]]", f'sha256 = "{digest}"', f"role = {toml_str(role)}", ""]
            for peer in self.nodes:
                lines += [
                    "[[peers]]",
                    f"id = {peer.id}",
                    f'peer = "127.0.0.1:{peer.peer_port}"',
                    f'client = "127.0.0.1:{peer.client_port}"',
                    "",
                ]
            node.config.write_text("\n".join(lines))

    # processes

    def start(self, node_id: int) -> None:
        node = self.node(node_id)
        assert node.proc is None or node.proc.poll() is not None, f"node {node_id} runs"
        env = dict(os.environ)
        env["RUST_LOG"] = "info,openraft=warn"
        with open(node.log, "ab") as log:
            node.proc = subprocess.Popen(
                [str(self.weir), "serve", "--config", str(node.config)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                env=env, cwd=self.dir, start_new_session=True,
            )
        node.paused = False
        _LIVE.add(node.proc)

    def start_all(self) -> None:
        for node in self.nodes:
            self.start(node.id)

    def kill(self, node_id: int) -> None:
        node = self.node(node_id)
        if node.proc is not None:
            _kill(node.proc)
        node.proc = None
        node.paused = False

    def pause(self, node_id: int) -> None:
        node = self.node(node_id)
        assert node.proc is not None
        os.kill(node.proc.pid, signal.SIGSTOP)
        node.paused = True

    def resume(self, node_id: int) -> None:
        node = self.node(node_id)
        if node.proc is not None:
            os.kill(node.proc.pid, signal.SIGCONT)
        node.paused = False

    def running(self) -> list[NodeProc]:
        return [n for n in self.nodes
                if n.proc is not None and n.proc.poll() is None and not n.paused]

    def close(self) -> None:
        for node in self.nodes:
            self.kill(node.id)

    # waits

    def leader(self, within: float = READY_WAIT) -> int:
        """The leader's id as a running, unpaused node reports it, once every running
        node is ready (bounded by ``within``)."""
        deadline = time.monotonic() + within
        last = "no answer"
        with self.http_client() as http:
            while time.monotonic() < deadline:
                for node in self.running():
                    try:
                        ready = all(
                            http.get(f"{self.scheme}://{n.http}/readyz").status_code == 200
                            for n in self.running()
                        )
                        r = http.get(f"{self.scheme}://{node.http}/v1/status")
                        body = r.json()
                    except (httpx.HTTPError, ValueError) as e:
                        last = repr(e)
                        continue
                    lead = body.get("leader") if isinstance(body, dict) else None
                    states = {m.get("id"): m.get("state") for m in body.get("nodes", [])}
                    alive = {n.id for n in self.running()}
                    if ready and lead in alive and states.get(lead) == "Leader":
                        return int(lead)
                    last = f"{r.status_code} {body}"
                time.sleep(POLL)
        raise TimeoutError(f"no leader within {within} s: {last}\n{self.log_tails()}")

    def log_tails(self, lines: int = 15) -> str:
        out = []
        for node in self.nodes:
            try:
                text = node.log.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                text = []
            out.append(f"--- node {node.id} ---\n" + "\n".join(text))
        return "\n".join(out)


def start_cluster(weir: Path, dir: Path, tls: bool = False,
                  tokens: dict[str, str] | None = None,
                  extra: list[str] | None = None) -> Cluster:
    if not weir.is_file():
        raise FileNotFoundError(
            f"no weir binary at {weir}: build it (cargo build) or set WEIR_BIN"
        )
    cluster = Cluster(weir=weir, dir=dir, tls=tls, tokens=dict(tokens or {}),
                      extra=list(extra or []))
    cluster.write_configs()
    cluster.start_all()
    try:
        cluster.leader()
    except BaseException:
        cluster.close()
        raise
    return cluster


# -- a cuttable TCP proxy ----------------------------------------------------------------


class Proxy:
    """A TCP proxy on 127.0.0.1 in front of one node's port, on a thread of its own.

    :meth:`cut` stops relaying in both directions without closing anything, as a partition
    does: bytes already read are held, connections accepted meanwhile are not connected
    upstream, and the client hears nothing at all. :meth:`heal` relays again; with
    ``reset=True`` it first closes every connection that lived through the cut (their
    held bytes are dropped), as a partition long enough for TCP to give up would.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._open: asyncio.Event | None = None
        self._conns: set[asyncio.StreamWriter] = set()
        self._server: asyncio.AbstractServer | None = None
        started = threading.Event()
        self._thread = threading.Thread(target=self._main, args=(started,), daemon=True)
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError("proxy did not start")

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _main(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)

        async def setup() -> None:
            self._open = asyncio.Event()
            self._open.set()
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

        self._loop.run_until_complete(setup())
        started.set()
        self._loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._open is not None
        self._conns.add(writer)
        up_w: asyncio.StreamWriter | None = None
        try:
            await self._open.wait()
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.target_port)
            self._conns.add(up_w)
            await asyncio.gather(self._pump(reader, up_w), self._pump(up_r, writer))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for w in (writer, up_w):
                if w is not None:
                    self._conns.discard(w)
                    w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._open is not None
        try:
            while True:
                await self._open.wait()
                data = await reader.read(65536)
                if not data:
                    break
                await self._open.wait()
                writer.write(data)
                await writer.drain()
        except (OSError, ConnectionError):
            pass
        finally:
            writer.close()

    def _call(self, fn: Callable[[], None]) -> None:
        done = threading.Event()

        def run() -> None:
            try:
                fn()
            finally:
                done.set()

        self._loop.call_soon_threadsafe(run)
        if not done.wait(5):
            raise RuntimeError("proxy loop did not answer")

    def cut(self) -> None:
        def go() -> None:
            assert self._open is not None
            self._open.clear()

        self._call(go)

    def heal(self, reset: bool = False) -> None:
        def go() -> None:
            assert self._open is not None
            if reset:
                for w in list(self._conns):
                    w.transport.abort()
                self._conns.clear()
            self._open.set()

        self._call(go)

    def close(self) -> None:
        def go() -> None:
            if self._server is not None:
                self._server.close()
            for w in list(self._conns):
                w.transport.abort()
            self._loop.stop()

        with contextlib.suppress(RuntimeError):
            self._call(go)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()


def wait_until(
    predicate: Callable[[], bool], within: float, what: str, every: float = POLL
) -> None:
    """Polls ``predicate()`` until true, at most ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(every)
    raise TimeoutError(f"not within {within} s: {what}")


async def async_wait_until(
    predicate: Callable[[], Awaitable[bool]], within: float, what: str, every: float = POLL
) -> None:
    """:func:`wait_until` for coroutines: ``predicate`` is an async callable."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(every)
    raise TimeoutError(f"not within {within} s: {what}")


def proxies_for(cluster: Cluster, order: list[int] | None = None) -> Iterator[Proxy]:
    """One proxy per node's HTTP port, in ``order`` of node ids (default 1, 2, 3)."""
    for node_id in order or [n.id for n in cluster.nodes]:
        yield Proxy(cluster.node(node_id).http_port)
