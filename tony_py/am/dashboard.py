"""The page behind the tracking URL (a minimal table; the full dashboard is a later issue)."""

from __future__ import annotations

import html


def render(status: dict) -> bytes:
    rows = "".join(
        "<tr>" + "".join(
            f"<td>{html.escape(str(v))}</td>"
            for v in (t["name"], t["state"], t.get("host") or "",
                      t.get("exit_code") if t.get("exit_code") is not None else "")
        ) + (f"<td><a href='{html.escape(t['log_url'])}'>logs</a></td>" if t.get("log_url") else "<td></td>") + "</tr>"
        for t in status.get("tasks", [])
    )
    diag = html.escape(status.get("diagnostics") or "")
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>TonY-py "
        f"{html.escape(status.get('app_id', ''))}</title></head><body>"
        f"<h1>{html.escape(status.get('app_id', ''))} — {html.escape(status.get('state', ''))}</h1>"
        "<table border='1' cellpadding='4'><tr><th>task</th><th>state</th><th>host</th><th>exit</th>"
        f"<th></th></tr>{rows}</table><pre>{diag}</pre>"
        "<p><a href='status.json'>status.json</a></p></body></html>"
    )
    return page.encode()
