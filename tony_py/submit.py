"""`python -m tony_py.submit …`: TonY's ClusterSubmitter, in Python."""

import sys

if __name__ == "__main__":
    from tony_py.bridge.interrupts import guard

    guard.install()  # first: a Ctrl-C while the client is still importing must not print a traceback
    launch = None
    try:
        from tony_py.bridge.gateway import early_launch

        launch = early_launch(sys.argv[1:])  # the JVM starts while the client imports and checks
        from tony_py.client.submit import main
    except BaseException as exc:  # noqa: BLE001 - an interrupt may come wrapped (guard.caused)
        if not guard.caused(exc):
            raise
        if launch is not None:
            launch.discard()
        sys.exit(130)
    sys.exit(main(prog="python -m tony_py.submit", launch=launch))
