"""One look at a running application without a JVM, for the deferrable operator's trigger: YARN's
state from the ResourceManager's REST API, and the AM's status.json (signed with the
application's secret, so it has the task table and root cause) while the AM runs.

Blocking (requests and http.client); the trigger runs each look in a thread
(asyncio.to_thread), so the triggerer's event loop never waits on the network. No airflow here.
"""

from __future__ import annotations

import requests

from tony_py import spnego
from tony_py.airflow.rules import FollowState
from tony_py.auth import AuthError, Signer, call_json, client_principal
from tony_py.client.job import FINAL_STATES

HTTP_TIMEOUT_S = 5.0
# Only what the operator needs at the end travels in the trigger's event (it is stored in the
# metadata DB): the verdict, the root cause, the diagnostics with the stderr tail.
_END_KEYS = ("state", "final_status", "diagnostics", "root_cause", "restarts_used", "infra_restarts_used")


def rm_app(rm_urls: list[str], app_id: str, http=None) -> dict:
    """The ResourceManager's view of the application (the first RM of an HA pair that answers
    with it), asked with the worker's Kerberos ticket where the RM's web UI wants one (SPNEGO).
    Raises OSError when none does."""
    http = http or spnego.session()
    errors = []
    for url in rm_urls:
        try:
            resp = http.get(f"{url.rstrip('/')}/ws/v1/cluster/apps/{app_id}", timeout=HTTP_TIMEOUT_S,
                                headers={"Accept": "application/json"})
            if resp.status_code == 200 and isinstance(resp.json().get("app"), dict):
                return resp.json()["app"]
            errors.append(f"{url}: HTTP {resp.status_code}")
        except (requests.RequestException, ValueError) as exc:
            errors.append(f"{url}: {exc}")
    raise OSError(f"no ResourceManager answered for {app_id}: " + "; ".join(errors))


def am_status(app: dict, secret: str | None) -> dict | None:
    """The AM's status.json while it runs (None before it registers, after it went, or without
    the secret)."""
    address = app.get("amRPCAddress") or ""  # the AM registers its HTTP endpoint's host:port
    if app.get("state") != "RUNNING" or not secret or ":" not in address or address.endswith(":-1"):
        return None
    try:
        code, status = call_json(Signer(secret, client_principal()), f"http://{address}", "GET", "/status.json",
                                 None, timeout=HTTP_TIMEOUT_S)
    except (OSError, AuthError, ValueError):
        return None
    return status if code == 200 and isinstance(status, dict) else None


def look(state: FollowState, last_status: dict | None) -> tuple[dict, dict | None]:
    """One poll: (YARN's app, the AM's status or the last one seen)."""
    app = rm_app(state.rm_urls, state.app_id)
    return app, am_status(app, state.secret) or last_status


def done(app: dict) -> bool:
    return app.get("state") in FINAL_STATES


def end_event(state: FollowState, app: dict, status: dict | None) -> dict:
    """The trigger's event payload once YARN says the application ended."""
    return {"app_id": state.app_id, "yarn_state": app.get("state"), "final_status": app.get("finalStatus"),
            "yarn_diagnostics": (app.get("diagnostics") or "").strip(),
            "am_status": {k: (status or {}).get(k) for k in _END_KEYS} if status else None}


def error_event(state: FollowState, message: str) -> dict:
    return {"app_id": state.app_id, "error": message}
