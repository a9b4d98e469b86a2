"""The sandbox's minimum isolation: below it nothing runs, and the error names the missing layer and the fix."""

import pytest

from verl.utils.sandbox import SandboxIsolationError, ensure_isolation, isolation_layers, run_python
from verl.utils.sandbox.policy import DEFAULT_MINIMUM, ENV_VAR, check_isolation, minimum_from

FULL = ("netns", "no_new_privs", "landlock-fs", "rlimits", "audit_hook")


def test_default_minimum_is_process_rlimits_network_writes(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert minimum_from(None) == DEFAULT_MINIMUM == ("process", "rlimits", "network", "writes")
    check_isolation(FULL, DEFAULT_MINIMUM)


@pytest.mark.parametrize(
    "layers, missing, fix",
    [
        (("landlock-fs", "rlimits", "audit_hook"), "network (layer netns)", "user namespaces"),
        (("netns", "rlimits", "audit_hook"), "writes (layer landlock-fs)", "Landlock"),
    ],
)
def test_a_missing_layer_is_named_with_its_fix(layers, missing, fix):
    with pytest.raises(SandboxIsolationError) as info:
        check_isolation(layers, DEFAULT_MINIMUM)
    message = str(info.value)
    assert missing in message and fix in message and ENV_VAR in message


def test_only_rlimits_and_the_hook_is_refused_by_default():
    """The machine the issue describes: no user namespaces, no Landlock."""
    with pytest.raises(SandboxIsolationError, match="network.*\n.*writes"):
        check_isolation(("no_new_privs", "rlimits", "audit_hook"), DEFAULT_MINIMUM)
    check_isolation(("no_new_privs", "rlimits", "audit_hook"), minimum_from("rlimits"))  # lowered on purpose


def test_minimum_from_env_and_argument(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "rlimits, network")
    assert minimum_from(None) == ("process", "rlimits", "network")
    assert minimum_from(["writes"]) == ("process", "writes")
    with pytest.raises(ValueError, match="min_isolation.*'dns'"):
        minimum_from("dns")
    monkeypatch.setenv(ENV_VAR, "netns")
    with pytest.raises(ValueError, match=ENV_VAR):
        minimum_from(None)


def test_run_python_refuses_below_the_minimum_and_runs_nothing(monkeypatch, tmp_path):
    layers = isolation_layers()
    # a requirement this machine cannot meet, simulated by pretending the probe found fewer layers
    monkeypatch.setattr("verl.utils.sandbox.local.isolation_layers", lambda: ("rlimits", "audit_hook"))
    marker = tmp_path / "ran"
    with pytest.raises(SandboxIsolationError, match="network"):
        run_python(f"open({str(marker)!r}, 'w').write('x')")
    assert not marker.exists()
    assert run_python("print(1)", min_isolation="rlimits").stdout == "1\n"
    monkeypatch.undo()
    assert ensure_isolation("process") == layers
