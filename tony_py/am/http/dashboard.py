"""The AM's page at the tracking URL: the job at a glance, refreshed in place.

One HTML document with its style and script inline (no external scripts or fonts: clusters are
often offline). The status comes embedded for the first paint and is then fetched again from
`status.json` (a relative link, so it works directly and behind YARN's proxy) every
REFRESH_MS; everything is drawn with textContent, never from HTML in the data.
"""

from __future__ import annotations

import json

from tony_py.web.page import esc, frame

REFRESH_MS = 2000

SCRIPT = r"""
const REFRESH_MS = %(refresh)d;
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) { if (v !== null && v !== undefined) e.setAttribute(k, v); }
  for (const k of kids) { if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k)); }
  return e;
}
// Only http(s) links (relative ones resolve to this page's): a URL in the status must not run script.
function safeHref(href) {
  try { return ['http:', 'https:'].includes(new URL(href, document.baseURI).protocol) ? href : null; }
  catch (e) { return null; }
}
function link(href, text) {
  return href && safeHref(href) ? el('a', {href: href, target: '_blank', rel: 'noopener'}, text) : '';
}
function when(ts) { return ts ? new Date(ts * 1000).toLocaleString() : ''; }
function dur(s) { if (s == null || s < 0) return ''; s = Math.floor(s);
  return Math.floor(s / 3600) + ':' + String(Math.floor(s %% 3600 / 60)).padStart(2, '0') + ':' + String(s %% 60).padStart(2, '0'); }
function size(n) { if (typeof n !== 'number') return ''; const u = ['B','KB','MB','GB','TB']; let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; } return (i < 2 ? n.toFixed(0) : n.toFixed(1)) + ' ' + u[i]; }
// tony_py/advice's findings, most pressing first: the evidence and the change to paste.
function adviceList(findings) {
  const list = el('ol', {class: 'advice'});
  for (const f of findings) {
    const s = f.suggestion;
    const change = s.kind === 'conf' ? '--conf ' + s.key + '=' + s.value : s.key + ': ' + s.value;
    list.append(el('li', {'data-heuristic': f.heuristic}, el('span', {class: 'severity ' + f.severity}, f.severity), ' ',
      f.heuristic + (f.task_type ? ' ' + f.task_type : '') + ': ' + f.evidence, el('br'), el('code', {}, change)));
  }
  return list;
}
function section(title, body, id) { return el('section', {id: id}, el('h2', {}, title), el('div', {class: 'body'}, body)); }
function logLinks(t) {
  if (!t.log_url) return '';
  const base = t.log_url.replace(/\/$/, '');
  const a = t.attempt || 0;
  const span = el('span', {});
  [['stdout', 'attempt-' + a + '.stdout'], ['stderr', 'attempt-' + a + '.stderr'], ['executor', 'executor.log']]
    .forEach(([label, file], i) => { if (i) span.append(' · '); span.append(link(base + '/' + file + '/?start=0', label)); });
  return span;
}
function render(s) {
  const now = Date.now() / 1000;
  document.getElementById('heading').textContent = (s.app_id || '') + (s.name ? ' — ' + s.name : '');
  const sub = document.getElementById('subtitle');
  sub.replaceChildren(el('span', {class: 'state ' + (s.final_status || s.state)}, s.final_status || s.state || '?'),
    ' · ' + (s.framework || '') + (s.am_attempt > 1 ? ' · AM attempt ' + s.am_attempt : '') +
    (s.restarts_used ? ' · restart ' + s.restarts_used + ' of ' + s.restarts_allowed : '') +
    (s.preemptions ? ' · preempted ' + s.preemptions + 'x' : '') +
    (s.infra_restarts_used ? ' · infrastructure restart ' + s.infra_restarts_used + ' of ' + s.infra_restarts_allowed : ''));
  const main = document.getElementById('main');
  const kids = [];
  const facts = el('dl', {});
  const fact = (k, v) => { if (v !== '' && v !== null && v !== undefined) facts.append(el('dt', {}, k), el('dd', {}, v)); };
  fact('application', s.app_id); fact('state', s.state); fact('user', s.user); fact('queue', s.queue);
  fact('started', when(s.started_at)); fact('running for', s.started_at ? dur((s.finished_at || now) - s.started_at) : '');
  fact('AM log', link(s.am_log_url, 'am.log')); fact('TensorBoard', link(s.tensorboard_url, s.tensorboard_url));
  for (const d of s.dashboards || []) fact(d.name, link(d.url, d.url));
  if (s.detail) fact('note', s.detail);
  kids.push(section('Job', facts, 'job'));
  if (s.root_cause && s.final_status && s.final_status !== 'SUCCEEDED') {
    const rc = s.root_cause;
    kids.push(section('Root cause', el('div', {class: 'root'},
      el('div', {}, rc.task + ' (attempt ' + rc.attempt + (rc.host ? ' on ' + rc.host : '') + '): ' + rc.message),
      rc.stderr_tail ? el('pre', {}, rc.stderr_tail) : ''), 'root-cause'));
  }
  const table = el('table', {id: 'tasks'});
  const head = ['task', 'state', 'host', 'attempt', 'exit', 'memory', 'CPU', 'GPU', 'running', 'logs'];
  table.append(el('thead', {}, el('tr', {}, ...head.map(h => el('th', {}, h)))));
  const body = el('tbody', {});
  for (const t of s.tasks || []) {
    const m = t.metrics || {};
    body.append(el('tr', {'data-task': t.name},
      el('td', {}, t.name), el('td', {class: 'state ' + t.state}, t.state), el('td', {}, t.host || ''),
      el('td', {}, t.attempt), el('td', {}, t.signal || (t.exit_code == null ? '' : t.exit_code)),
      el('td', {}, size(m.task_rss_bytes)), el('td', {}, m.task_cpu_percent == null ? '' : m.task_cpu_percent + '%%'),
      el('td', {}, m.gpu_utilization == null ? '' : m.gpu_utilization + '%%'),
      el('td', {}, t.started_at ? dur((t.finished_at || now) - t.started_at) : ''), el('td', {}, logLinks(t))));
  }
  table.append(body);
  kids.push(section('Tasks (' + (s.tasks || []).length + ')', table, 'tasks-section'));
  if (s.advice && s.advice.length) kids.push(section('Advice (' + s.advice.length + ')', adviceList(s.advice), 'advice'));
  if (s.events && s.events.length) {
    const ev = el('table', {id: 'events'});
    ev.append(el('thead', {}, el('tr', {}, el('th', {}, 'time'), el('th', {}, 'event'), el('th', {}, 'task'), el('th', {}, 'what'))));
    const eb = el('tbody', {});
    for (const e of s.events.slice().reverse()) {
      eb.append(el('tr', {}, el('td', {class: 'muted'}, when(e.ts)), el('td', {}, e.kind), el('td', {}, e.task || ''),
                    el('td', {}, e.message || '')));
    }
    ev.append(eb);
    kids.push(section('Timeline', ev, 'timeline'));
  }
  if (s.diagnostics) kids.push(section('Diagnostics', el('pre', {}, s.diagnostics), 'diagnostics'));
  kids.push(el('p', {class: 'muted'}, 'Refreshed ' + new Date().toLocaleTimeString() + ' · ', link('status.json', 'status.json')));
  main.replaceChildren(...kids);
}
async function refresh() {
  try {
    const r = await fetch('status.json', {cache: 'no-store'});
    if (r.ok) { render(await r.json()); }
  } catch (e) {
    document.getElementById('subtitle').append(' · the AM no longer answers: the job has ended (see tony history)');
    return;
  }
  setTimeout(refresh, REFRESH_MS);
}
render(JSON.parse(document.getElementById('data').textContent));
setTimeout(refresh, REFRESH_MS);
"""


def render(status: dict) -> bytes:
    # inside <script>, '<!--' and '</script' change how the page is parsed: no '<' at all
    data = json.dumps(status, default=str).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    body = (f"<script type='application/json' id='data'>{data}</script>"
            "<noscript>This page needs JavaScript; the same data is at <a href='status.json'>status.json</a>."
            "</noscript>")
    return frame(f"TonY-py {status.get('app_id', '')}", esc(status.get("app_id", "")), esc(status.get("state", "")),
                 body, SCRIPT % {"refresh": REFRESH_MS})
