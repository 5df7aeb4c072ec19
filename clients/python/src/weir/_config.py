"""Where the cluster is and how to reach it: servers, CA, token, tenant, with the
environment variables the CLI honours.

**Servers are HTTP addresses.** This client speaks the nodes' HTTP/JSON API, served on
each node's ``http_listen`` address (``127.0.0.1:7611`` .. ``7613`` in the shipped
``config/node1..3.toml``), not on the binary client port the CLI and the Rust library use
(``client_addr``, ``7411`` .. ``7413``). An entry is ``host:port`` (the scheme is
``https`` when a CA is given, else ``http``) or a URL ``http://host:port`` /
``https://host:port``.

Environment, used when the argument is not given:

- ``WEIR_HTTP_SERVERS``, else ``WEIR_SERVERS``: comma-separated servers (default
  ``127.0.0.1:7611``). ``WEIR_SERVERS`` is the CLI's variable too, where it names client
  ports; a shell that runs both sets ``WEIR_HTTP_SERVERS`` for this client.
- ``WEIR_CA``: a PEM CA file; the servers are then verified against it over TLS.
- ``WEIR_TOKEN``: the bearer token (``Authorization: Bearer``).
- ``WEIR_TENANT``: the tenant operations act in (default ``default``).
- ``WEIR_GROUP``: on a cluster of several Raft groups, the data group the client speaks to
  (sent as the ``Weir-Group`` header; the nodes' default group without it). A session is
  its group's: a client holds permits of the tenants placed in its group, and a session's
  request for a tenant of another group is refused ``WrongGroup`` naming that group.

An empty variable counts as unset.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

DEFAULT_SERVER = "127.0.0.1:7611"
DEFAULT_TENANT = "default"


def _env(env: Mapping[str, str], name: str) -> str | None:
    v = env.get(name)
    return v if v else None


def server_urls(servers: Iterable[str], tls: bool) -> list[str]:
    """Base URLs for ``servers`` (``host:port`` or URLs), without a trailing slash."""
    out: list[str] = []
    for s in servers:
        s = s.strip()
        if not s:
            continue
        if "://" not in s:
            s = ("https://" if tls else "http://") + s
        out.append(s.rstrip("/"))
    if not out:
        raise ValueError("no servers given")
    return out


@dataclass(frozen=True)
class Settings:
    """Resolved settings of a client."""

    urls: tuple[str, ...]
    ca: str | None
    token: str | None
    tenant: str
    #: The data group the client speaks to (``None``: the nodes' default group).
    group: int | None = None


def _group(group: int | None, env: Mapping[str, str]) -> int | None:
    if group is None:
        text = _env(env, "WEIR_GROUP")
        if text is None:
            return None
        try:
            group = int(text.strip())
        except ValueError:
            raise ValueError(f"WEIR_GROUP must be a group number: got {text!r}") from None
    if isinstance(group, bool) or not isinstance(group, int) or group < 0:
        raise ValueError(f"group must be a group number (0 or more): got {group!r}")
    return group


def resolve(
    servers: str | Iterable[str] | None,
    ca: str | os.PathLike[str] | None,
    token: str | None,
    tenant: str | None,
    env: Mapping[str, str] | None = None,
    group: int | None = None,
) -> Settings:
    """Fills what is not given from the environment (module doc)."""
    env = os.environ if env is None else env
    if servers is None:
        text = _env(env, "WEIR_HTTP_SERVERS") or _env(env, "WEIR_SERVERS") or DEFAULT_SERVER
        listed: list[str] = text.split(",")
    elif isinstance(servers, str):
        listed = servers.split(",")
    else:
        listed = list(servers)
    ca_path = os.fspath(ca) if ca is not None else _env(env, "WEIR_CA")
    token = token if token is not None else _env(env, "WEIR_TOKEN")
    tenant = tenant if tenant is not None else (_env(env, "WEIR_TENANT") or DEFAULT_TENANT)
    return Settings(
        urls=tuple(server_urls(listed, tls=ca_path is not None)),
        ca=ca_path,
        token=token,
        tenant=tenant,
        group=_group(group, env),
    )
