"""checkpoint_engine.custom_backend_module: a transport of the user's, registered by importing their module, serves
``checkpoint_engine.backend`` in the workers and in the driver's config check."""

from __future__ import annotations

import sys

import pytest
import torch

from verl.checkpoint_engine import build_checkpoint_engine, get_checkpoint_engine_cls

# a transport of the user's: the in-process one under another name, counting what it sends
TRANSPORT = """
from verl.checkpoint_engine.base import register_checkpoint_engine
from verl.checkpoint_engine.local import LocalCheckpointEngine

SENT = []


@register_checkpoint_engine("user_mailbox")
class UserMailbox(LocalCheckpointEngine):
    def send_weights(self, weights, version):
        stats = super().send_weights(weights, version)
        SENT.append(version)
        return stats
"""


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "user_transport.py").write_text(TRANSPORT)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "user_transport"


def test_the_module_registers_the_backend_the_workers_then_build(user_module):
    if user_module not in sys.modules:  # not yet imported: the name is unknown
        with pytest.raises(ValueError, match="user_mailbox"):
            get_checkpoint_engine_cls("user_mailbox")
    sender = build_checkpoint_engine("user_mailbox", 0, 2, 1, custom_backend_module=user_module)
    receiver = build_checkpoint_engine("user_mailbox", 1, 2, 1, custom_backend_module=user_module)
    assert type(sender).__name__ == "UserMailbox" and type(sender).__module__ == user_module
    for engine in (sender, receiver):
        engine.connect("user-mailbox-test", 1)
    weights = [("w", torch.arange(6.0).reshape(2, 3)), ("b", torch.ones(4, dtype=torch.bfloat16))]
    sender.send_weights(iter(weights), version=7)
    received = dict(receiver.receive_weights())
    assert receiver.version == 7 and sys.modules[user_module].SENT == [7]
    for name, tensor in weights:
        assert torch.equal(received[name], tensor)
    for engine in (sender, receiver):
        engine.finalize()


def test_an_unimportable_module_is_an_import_error():
    with pytest.raises(ImportError):
        get_checkpoint_engine_cls("naive", custom_backend_module="no_such_transport_module")
