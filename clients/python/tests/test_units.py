"""What needs no cluster: the belief arithmetic, settings, error mapping, scopes, version."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import weir
from weir._config import resolve
from weir.errors import from_response


def test_the_margin_is_a_tenth_of_the_ttl_and_at_least_100_ms() -> None:
    assert weir.margin_for(3.0) == pytest.approx(0.3)
    assert weir.margin_for(30.0) == pytest.approx(3.0)
    assert weir.margin_for(0.5) == pytest.approx(0.1)


def test_the_deadline_runs_from_the_send_time_of_the_acknowledged_keepalive() -> None:
    assert weir.deadline_after(100.0, 3.0) == pytest.approx(102.7)
    assert weir.believed_at(102.7, 102.69)
    assert not weir.believed_at(102.7, 102.7)


def test_the_boot_clock() -> None:
    assert weir.CLOCK_NAME == "CLOCK_BOOTTIME"  # Linux
    a = weir.boot_now()
    assert weir.boot_now() >= a


def test_settings_from_arguments_and_the_environment() -> None:
    env = {"WEIR_SERVERS": "a:1,b:2", "WEIR_TENANT": "t", "WEIR_TOKEN": "s", "WEIR_CA": ""}
    s = resolve(None, None, None, None, env)
    assert s.urls == ("http://a:1", "http://b:2")
    assert (s.tenant, s.token, s.ca) == ("t", "s", None)
    s = resolve(None, None, None, None, {**env, "WEIR_HTTP_SERVERS": "c:3", "WEIR_CA": "/ca"})
    assert s.urls == ("https://c:3",) and s.ca == "/ca"
    s = resolve(["http://x:1/", " https://y:2 "], None, "tok", "u", env)
    assert s.urls == ("http://x:1", "https://y:2") and s.token == "tok" and s.tenant == "u"
    assert resolve(None, None, None, None, {}).urls == ("http://127.0.0.1:7611",)
    assert resolve(None, None, None, None, {}).tenant == "default"
    with pytest.raises(ValueError):
        resolve(" , ", None, None, None, {})


def test_the_group_from_the_argument_or_weir_group() -> None:
    assert resolve(None, None, None, None, {}).group is None
    assert resolve(None, None, None, None, {"WEIR_GROUP": "2"}).group == 2
    assert resolve(None, None, None, None, {"WEIR_GROUP": "2"}, group=1).group == 1
    with pytest.raises(ValueError, match="WEIR_GROUP must be a group number: got 'two'"):
        resolve(None, None, None, None, {"WEIR_GROUP": "two"})
    with pytest.raises(ValueError, match="got -1"):
        resolve(None, None, None, None, {}, group=-1)


def test_errors_map_to_their_types_with_fields() -> None:
    e = from_response(409, {"error": "Halted", "message": "halted a (agent x): r",
                            "tenant": "a", "scope": {"Agent": "x"}, "reason": "r"})
    assert isinstance(e, weir.Halted) and e.scope == weir.HaltScope("x") and e.reason == "r"
    e = from_response(409, {"error": "Halted", "message": "m", "scope": "Tenant"})
    assert isinstance(e, weir.Halted) and e.scope.is_tenant
    e = from_response(429, {"error": "Busy", "message": "m", "retry_at_ms": 5,
                            "retry_after_ms": 1500}, "2")
    assert isinstance(e, weir.Busy) and e.retry_after == 1.5 and e.retry_at_ms == 5
    e = from_response(429, {"error": "Busy", "message": "m", "retry_at_ms": None})
    assert isinstance(e, weir.Busy) and e.retry_after is None
    e = from_response(429, {"error": "BudgetExhausted", "message": "m", "spent": 7,
                            "budget": 9, "held": 1, "hold": 2, "kind": "Tokens"})
    assert isinstance(e, weir.BudgetExhausted) and (e.spent, e.budget) == (7, 9)
    assert isinstance(from_response(401, {"error": "Unauthenticated"}), weir.Unauthenticated)
    assert isinstance(from_response(403, {"error": "Forbidden"}), weir.Forbidden)
    assert isinstance(from_response(503, {"error": "NoLeader"}), weir.Unavailable)
    unknown = from_response(503, {"error": "OutcomeUnknown"})
    assert isinstance(unknown, weir.OutcomeUnknown) and not unknown.definitely_failed
    assert isinstance(from_response(500, {"error": "Internal"}), weir.ProtocolError)
    assert isinstance(from_response(400, {"error": "BadRequest"}), weir.Invalid)
    assert isinstance(from_response(400, {"error": "Invalid"}), weir.Invalid)
    odd = from_response(418, {"error": "SomethingNew", "message": "m", "x": 1})
    assert type(odd) is weir.Refused and odd.name == "SomethingNew" and odd.fields["x"] == 1


def test_halt_scopes_as_the_server_writes_them() -> None:
    assert weir.HaltScope.parse("tenant").is_tenant
    assert weir.HaltScope.parse("Tenant").is_tenant
    assert weir.HaltScope.parse("agent bot 7") == weir.HaltScope("bot 7")
    assert weir.HaltScope.parse("agent", "bot") == weir.HaltScope("bot")
    assert weir.HaltScope.parse({"Agent": "bot"}) == weir.HaltScope("bot")
    assert str(weir.HaltScope("bot")) == "agent bot"
    with pytest.raises(ValueError):
        weir.HaltScope.parse(3)


def test_the_version_is_the_projects_cargo_version() -> None:
    cargo = Path(__file__).resolve().parents[3] / "Cargo.toml"
    if not cargo.is_file():
        pytest.skip("not inside the Weir repository")
    text = cargo.read_text()
    # The version of the workspace's packages, or of the root package.
    for table in ("[workspace.package]", "[package]"):
        if table in text:
            section = text[text.index(table) + len(table):].split("\n[", 1)[0]
            match = re.search(r'^version\s*=\s*"([^"]+)"', section, re.M)
            if match is not None:
                assert weir.__version__ == match.group(1)
                return
    pytest.fail(f"no version in {cargo}")
