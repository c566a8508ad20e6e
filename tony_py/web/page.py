"""One page frame and style for the AM dashboard and the portal. No external scripts, fonts or
images (clusters are often offline); links are relative, so pages work behind YARN's proxy
(/proxy/<appId>/) as well as directly."""

from __future__ import annotations

import html
import time
from urllib.parse import urlsplit

STYLE = """
:root { --fg:#1d232a; --muted:#5c6773; --line:#dde3ea; --bg:#f7f9fb; --ok:#1a7f37; --bad:#c62828;
        --run:#0b6bcb; --warn:#9a6700; }
* { box-sizing: border-box; }
body { margin:0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color:var(--fg);
       background:var(--bg); }
header { padding: 14px 24px; background:#fff; border-bottom:1px solid var(--line); }
header h1 { margin:0; font-size:18px; font-weight:600; }
header .sub { color:var(--muted); margin-top:2px; }
main { padding: 16px 24px 40px; }
section { background:#fff; border:1px solid var(--line); border-radius:6px; margin-bottom:16px; }
section h2 { font-size:14px; margin:0; padding:10px 14px; border-bottom:1px solid var(--line); }
section .body { padding: 10px 14px; }
table { border-collapse: collapse; width:100%; }
th, td { text-align:left; padding:6px 10px; border-bottom:1px solid var(--line); vertical-align:top; }
th { font-weight:600; color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.03em; }
tr:last-child td { border-bottom:none; }
dl { display:grid; grid-template-columns: max-content 1fr; gap:4px 16px; margin:0; }
dt { color:var(--muted); }
dd { margin:0; }
pre { margin:0; white-space:pre-wrap; word-break:break-word; font: 12px/1.4 ui-monospace, monospace; }
a { color: var(--run); text-decoration:none; }
a:hover { text-decoration:underline; }
.state { font-weight:600; }
.SUCCEEDED, .FINISHED, .DONE { color:var(--ok); }
.FAILED, .KILLED { color:var(--bad); }
.RUNNING, .REGISTERED, .LAUNCHED { color:var(--run); }
.STOPPED, .PREEMPTED, .RESTARTING, .FINISHING { color:var(--warn); }
.PENDING, .ALLOCATED, .ALLOCATING, .PARKED { color:var(--muted); }
.muted { color:var(--muted); }
.root { border-left:3px solid var(--bad); padding-left:10px; }
form.filters { display:flex; gap:10px; flex-wrap:wrap; padding:10px 14px; }
ol.advice { margin:0; padding-left:22px; }
ol.advice li { margin:6px 0; }
.severity { font-weight:600; text-transform:uppercase; font-size:11px; }
.severity.critical, .severity.severe { color:var(--bad); }
.severity.moderate { color:var(--warn); }
.severity.low { color:var(--muted); }
form.filters input, form.filters select { font: inherit; padding:3px 6px; }
"""


def esc(value) -> str:
    return html.escape("" if value is None else str(value))


def safe_url(url) -> str | None:
    """url if it is an absolute http(s) URL, else None: a link made from job data must not run
    script (javascript:, data:) once that data is shown to someone else."""
    if not isinstance(url, str):
        return None
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    return url if parts.scheme.lower() in ("http", "https") and parts.netloc else None


def when(ts) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else ""


def duration(seconds) -> str:
    if seconds is None:
        return ""
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def size(n) -> str:
    if not isinstance(n, (int, float)):
        return ""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit in ("B", "KB") else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def frame(title: str, heading: str, subtitle: str, body: str, script: str = "") -> bytes:
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'><link rel='icon' href='data:,'>"
            f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>"
            f"<header><h1 id='heading'>{heading}</h1><div class='sub' id='subtitle'>{subtitle}</div></header>"
            f"<main id='main'>{body}</main>{f'<script>{script}</script>' if script else ''}</body></html>").encode()
