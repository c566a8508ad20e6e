"""Markers by location: tests/unit are `unit`, tests/integration are `integration`. The unit
tier runs first: a broken change fails in seconds, and the Docker cluster's node image (for
tests/integration/multihost) is built in the background meanwhile instead of on its own."""

import threading

import pytest


@pytest.hookimpl(tryfirst=True)  # before -m selects by these markers
def pytest_collection_modifyitems(config, items):
    for item in items:
        path = str(item.fspath)
        if "/tests/unit/" in path:
            item.add_marker(pytest.mark.unit)
        elif "/tests/integration/" in path:
            item.add_marker(pytest.mark.integration)


def pytest_collection_finish(session):
    """What will run, after -m/-k deselection: the unit tier first (a stable sort keeps the order
    within each tier), and the node image built meanwhile if multi-host tests are among it."""
    items = session.items
    items.sort(key=lambda item: 0 if "/tests/unit/" in str(item.fspath) else 1)
    if not session.config.option.collectonly and any("/tests/integration/multihost/" in str(item.fspath)
                                                     for item in items):
        _BUILDS.append(_build_node_image_in_background())


_BUILDS: list = []


def pytest_sessionfinish(session):
    """A session that ends early (-x, Ctrl-C) lets the build finish rather than orphan its
    mmdebstrap; the image is then there for the next run."""
    for build in _BUILDS:
        if build is not None:
            build.join(timeout=300)


def _build_node_image_in_background() -> "threading.Thread | None":
    """The multi-host fixture's own ensure_image() waits for this build (one lock per process) and
    reports its error if it failed; here a failure is only left for that call to meet again."""
    from tony_py.cluster.engine import engine_available
    from tony_py.cluster.image import ensure_image

    if not engine_available()[0]:
        return None

    def build():
        try:
            ensure_image(log=lambda line: None)
        except Exception:  # noqa: BLE001 - the fixture's own call says what went wrong
            pass

    thread = threading.Thread(target=build, name="node-image-build", daemon=True)
    thread.start()
    return thread
