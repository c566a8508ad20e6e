"""tony_py.frameworks.ray_start: `ray start` waits RAY_raylet_start_wait_time_s for its raylet's
registration, as Ray's own message says, instead of the 30 s written into ray/_private/node.py."""

from __future__ import annotations

import inspect

import pytest

from tony_py.frameworks import ray_start


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_registration_is_asked_again_until_it_answers():
    clock, calls = Clock(), []

    def get_node(address, node_id):
        calls.append((address, node_id, clock.now))
        if clock.now < 45:
            raise RuntimeError("GCS cannot find the node")
        return {"node_id": node_id}

    waiting = ray_start.patient(get_node, 90, clock=clock, sleep=clock.sleep)
    assert waiting("gcs:1", "n1") == {"node_id": "n1"}
    assert len(calls) == 46 and calls[-1][2] == 45 and waiting.__wrapped__ is get_node


def test_past_the_extra_wait_rays_own_error_reaches_its_loop():
    clock = Clock()

    def get_node(*_):
        raise RuntimeError("RPC error: Deadline Exceeded")

    with pytest.raises(RuntimeError, match="Deadline Exceeded"):
        ray_start.patient(get_node, 90, clock=clock, sleep=clock.sleep)("gcs:1", "n1")
    assert clock.now == 90  # then node.py's own 30 s follow: 120 s in all


def test_other_errors_are_not_waited_on():
    clock = Clock()

    def get_node(*_):
        raise ValueError("bad address")

    with pytest.raises(ValueError):
        ray_start.patient(get_node, 90, clock=clock, sleep=clock.sleep)("x", "n1")
    assert clock.now == 0


@pytest.mark.parametrize("value,installed", [("120", True), ("30", False), ("", False), ("soon", False)])
def test_install_adds_only_what_rays_own_wait_lacks(value, installed, monkeypatch):
    import ray._private.services as services

    original = services.get_node
    monkeypatch.setattr(services, "get_node", original)  # restored after the test
    assert ray_start.install({ray_start.WAIT_ENV: value}) is installed
    assert (services.get_node is not original) is installed
    if installed:
        assert services.get_node.__wrapped__ is original


def test_ray_still_checks_the_registration_through_the_module_function():
    """What install() relies on: node.py's 30 s loop calls ray._private.services.get_node by
    its module path (a Ray release that changes that fails here first)."""
    import ray._private.node as node
    import ray._private.services as services

    source = inspect.getsource(node.Node.__init__)
    assert "ray._private.services.get_node(" in source and "raylet_start_wait_time_s = 30" in source
    assert list(inspect.signature(services.get_node).parameters) == ["gcs_address", "node_id"]
