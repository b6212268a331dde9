// meshtrain dashboard: polls the node's REST API and redraws. Everything a
// peer announced reaches the page through textContent only, never as HTML.
"use strict";

(() => {
  const POLL_MS = 2000;
  const TIMEOUT_MS = 5000;
  const HISTORY_N = 900;

  const $ = (sel) => document.querySelector(sel);
  const stat = (name) => document.querySelectorAll(`[data-stat="${name}"]`);
  const setStat = (name, text) => stat(name).forEach((el) => { el.textContent = text; });

  // ---- formatting ---------------------------------------------------------

  const finite = (v) => typeof v === "number" && Number.isFinite(v);
  const int = (v) => (finite(v) ? Math.round(v).toLocaleString("en-US") : "—");
  const fixed = (v, d) => (finite(v) ? v.toFixed(d) : "—");
  const pct = (v, d = 1) => (finite(v) ? (100 * v).toFixed(d) + "%" : "—");

  function compact(v) {
    if (!finite(v)) return "—";
    const a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(a >= 1e10 ? 0 : 1) + "G";
    if (a >= 1e6) return (v / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
    if (a >= 1e4) return (v / 1e3).toFixed(a >= 1e5 ? 0 : 1) + "k";
    if (a >= 100) return v.toFixed(0);
    if (a >= 10) return v.toFixed(1);
    if (a >= 1) return v.toFixed(2);
    if (a === 0) return "0";
    return v.toPrecision(2);
  }

  function seconds(s) {
    if (!finite(s)) return "—";
    if (s < 1) return Math.round(s * 1000) + " ms";
    if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + " s";
    const m = Math.floor(s / 60);
    if (m < 60) return `${m}m ${String(Math.floor(s % 60)).padStart(2, "0")}s`;
    const h = Math.floor(m / 60);
    if (h < 48) return `${h}h ${String(m % 60).padStart(2, "0")}m`;
    return `${Math.floor(h / 24)}d ${h % 24}h`;
  }

  function bytes(b) {
    if (!finite(b)) return "—";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
    return (i === 0 ? b.toFixed(0) : b.toFixed(1)) + " " + units[i];
  }

  // Peer IDs of one key type share their first characters; the tail tells
  // them apart.
  const shortID = (id) => (typeof id === "string" && id.length > 14 ? "…" + id.slice(-10) : id || "—");

  // ---- charts --------------------------------------------------------------

  // niceStep picks a round tick spacing (1, 2 or 5 times a power of ten).
  function niceStep(span, ticks) {
    const raw = span / ticks;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const f = raw / mag;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
  }

  // tickLabel prints an axis value with as many decimals as the tick
  // spacing needs, so neighbouring labels never read the same.
  function tickLabel(v, step) {
    let scale = 1, suffix = "";
    const a = Math.max(Math.abs(v), step);
    if (a >= 1e7) { scale = 1e6; suffix = "M"; } else if (a >= 1e4) { scale = 1e3; suffix = "k"; }
    const d = Math.max(0, Math.min(6, -Math.floor(Math.log10(step / scale) + 1e-9)));
    return (v / scale).toFixed(d) + suffix;
  }

  function relTime(ms) {
    const s = Math.round(ms / 1000);
    if (s === 0) return "now";
    if (Math.abs(s) < 120) return `${s}s`;
    if (Math.abs(s) < 7200) return `${Math.round(s / 60)}m`;
    return `${(s / 3600).toFixed(1)}h`;
  }

  // drawChart draws pts ([{x: ms, y: number|null}]) as a line on the
  // figure's canvas; null breaks the line. It records the number of points
  // drawn in the figure's data-points attribute.
  function drawChart(fig, pts, opts) {
    const canvas = fig.querySelector("canvas");
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth, h = canvas.clientHeight;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(h * dpr);
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const valid = pts.filter((p) => finite(p.y));
    fig.dataset.points = String(valid.length);
    fig.querySelector(".latest").textContent = valid.length ? opts.format(valid[valid.length - 1].y) : "";
    ctx.font = "11px system-ui, sans-serif";
    if (valid.length === 0) {
      ctx.fillStyle = "#98a0b3";
      ctx.textAlign = "center";
      ctx.fillText(opts.empty || "waiting for data", w / 2, h / 2);
      return;
    }
    let x0 = valid[0].x, x1 = valid[valid.length - 1].x;
    if (x1 - x0 < 1000) x0 = x1 - 1000;
    let y0 = Math.min(...valid.map((p) => p.y)), y1 = Math.max(...valid.map((p) => p.y));
    // A loss that spans orders of magnitude reads best on a log scale;
    // T maps values to the axis either way.
    const log = opts.log && y0 > 0 && y1 / y0 > 30;
    const T = log ? Math.log10 : (v) => v;
    const ticks = [];
    let labels;
    if (log) {
      y0 = Math.floor(Math.log10(y0));
      y1 = Math.ceil(Math.log10(y1));
      for (let k = y0; k <= y1; k++) ticks.push(k);
      labels = ticks.map((k) => String(Number((10 ** k).toPrecision(1))));
    } else {
      if (opts.zero) y0 = Math.min(0, y0);
      if (y1 - y0 < 1e-9) { const d = Math.abs(y1) * 0.1 || 1; y0 -= d; y1 += d; }
      const step = niceStep(y1 - y0, 4);
      y0 = Math.floor(y0 / step) * step;
      y1 = Math.ceil(y1 / step) * step;
      if (opts.max !== undefined) y1 = Math.min(y1, opts.max);
      if (opts.min !== undefined) y0 = Math.max(y0, opts.min);
      for (let v = y0; v <= y1 + step / 2; v += step) ticks.push(v);
      labels = ticks.map((v) => tickLabel(v, step) + (opts.unit || ""));
    }
    // The left margin fits the widest label.
    const pad = { l: Math.ceil(Math.max(...labels.map((l) => ctx.measureText(l).width))) + 10, r: 10, t: 8, b: 20 };
    const pw = w - pad.l - pad.r, ph = h - pad.t - pad.b;
    const X = (x) => pad.l + ((x - x0) / (x1 - x0)) * pw;
    const Y = (y) => pad.t + (1 - (T(y) - y0) / (y1 - y0)) * ph;

    // grid and y labels
    ctx.strokeStyle = "#edf0f4";
    ctx.fillStyle = "#8a92a6";
    ctx.lineWidth = 1;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    ticks.forEach((v, i) => {
      const y = Math.round(pad.t + (1 - (v - y0) / (y1 - y0)) * ph) + 0.5;
      ctx.beginPath(); ctx.moveTo(pad.l, y); ctx.lineTo(w - pad.r, y); ctx.stroke();
      ctx.fillText(labels[i], pad.l - 6, y);
    });
    // x labels: time relative to the newest point
    ctx.textBaseline = "top";
    for (let i = 0; i <= 3; i++) {
      const x = x0 + ((x1 - x0) * i) / 3;
      ctx.textAlign = i === 0 ? "left" : i === 3 ? "right" : "center";
      ctx.fillText(relTime(x - x1), X(x), h - pad.b + 5);
    }
    // area and line; gaps where y is missing
    const grad = ctx.createLinearGradient(0, pad.t, 0, pad.t + ph);
    grad.addColorStop(0, opts.color + "33");
    grad.addColorStop(1, opts.color + "03");
    let run = [];
    const flush = () => {
      if (run.length === 0) return;
      ctx.beginPath();
      ctx.moveTo(X(run[0].x), pad.t + ph);
      run.forEach((p) => ctx.lineTo(X(p.x), Y(p.y)));
      ctx.lineTo(X(run[run.length - 1].x), pad.t + ph);
      ctx.closePath();
      ctx.fillStyle = grad;
      ctx.fill();
      ctx.beginPath();
      run.forEach((p, i) => (i ? ctx.lineTo(X(p.x), Y(p.y)) : ctx.moveTo(X(p.x), Y(p.y))));
      ctx.strokeStyle = opts.color;
      ctx.lineWidth = 2;
      ctx.lineJoin = "round";
      ctx.stroke();
      run = [];
    };
    pts.forEach((p) => (finite(p.y) ? run.push(p) : flush()));
    flush();
    const last = valid[valid.length - 1];
    ctx.beginPath();
    ctx.arc(X(last.x), Y(last.y), 3.5, 0, 2 * Math.PI);
    ctx.fillStyle = opts.color;
    ctx.fill();
  }

  const charts = [
    {
      fig: $("#chart-loss"), color: "#3563e9", zero: false, log: true,
      series: (h) => h.map((p) => ({ x: Date.parse(p.time), y: p.loss })),
      format: (v) => v.toFixed(4),
    },
    {
      // The node records accuracy 0 until its first evaluation; those
      // points are "not measured", not a model that is always wrong.
      fig: $("#chart-accuracy"), color: "#1f9d63", zero: false, min: 0, max: 100,
      empty: "waiting for the first evaluation",
      series: (h) => {
        const first = h.findIndex((p) => finite(p.accuracy) && p.accuracy > 0);
        return first < 0 ? [] : h.slice(first).map((p) => ({ x: Date.parse(p.time), y: finite(p.accuracy) ? 100 * p.accuracy : null }));
      },
      format: (v) => v.toFixed(2) + "%", unit: "%",
    },
    {
      fig: $("#chart-speed"), color: "#c9691a", zero: true,
      series: (h) => h.map((p) => ({ x: Date.parse(p.time), y: p.samples_per_s })),
      format: (v) => compact(v) + "/s",
    },
  ];

  let lastHistory = [];
  function drawCharts() {
    charts.forEach((c) => drawChart(c.fig, c.series(lastHistory), c));
  }

  // ---- status and peers ----------------------------------------------------

  function renderStatus(s) {
    const id = $("#peer-id");
    id.textContent = s.peer_id || "offline";
    id.title = s.peer_id || "";
    $("#network").textContent = s.network || "";
    $("#mode").textContent = s.mode || "";
    $("#profile").textContent = s.profile || "";
    document.title = `meshtrain · step ${int(s.step)}` + (s.peer_id ? ` · ${shortID(s.peer_id)}` : "");
    setStat("step", int(s.step));
    setStat("epoch", `epoch ${int(s.epoch)}`);
    setStat("progress", compact(s.progress));
    setStat("loss", fixed(s.loss, 4));
    setStat("test_accuracy", s.test_accuracy > 0 ? pct(s.test_accuracy, 2) : "—");
    setStat("samples_per_s", compact(s.samples_per_s) + "/s");
    setStat("busy", `busy ${pct(s.busy_fraction)} · waited ${seconds(s.network_wait_s)}`);
    setStat("peers", int(s.peers));
    setStat("merges", `${int(s.merges)} merges · ${int(s.catch_ups)} catch-ups`);
    setStat("uptime", seconds(s.uptime_s));
    setStat("version", s.version ? "version " + s.version : "");
    const g = s.gossip || {};
    setStat("traffic", `sent ${bytes(g.bytes_sent)} · received ${bytes(g.bytes_received)}`);
    setStat("exchanges", `${int(g.exchanges_done)} started · ${int(g.exchanges_served)} served · ` +
      `${int(g.pulls_done)} pulls · ${int(s.exchanges_failed)} failed (${int(s.exchange_timeouts)} timeouts) · ` +
      `${int(g.refused_by_peer)} refused by peers`);
    const rej = Object.entries(g.rejected || {}).filter(([, n]) => n > 0);
    setStat("rejected", rej.length ? rej.map(([r, n]) => `${r} ${int(n)}`).join(" · ") : "none");
    const m = s.last_merge;
    setStat("last_merge", m
      ? `${m.inbound ? "from" : "with"} ${shortID(m.partner)} · staleness ${fixed(m.staleness, 2)} steps · weight ${fixed(m.weight, 3)} · ${seconds((Date.now() - Date.parse(m.time)) / 1000)} ago`
      : "none yet");
    const c = s.last_checkpoint;
    setStat("last_checkpoint", c
      ? `#${c.id} at step ${int(c.step)} · ${seconds((Date.now() - Date.parse(c.created)) / 1000)} ago`
      : "none in this run");
    setStat("fingerprint", s.fingerprint || "—");
    setStat("addrs", (s.addrs || []).join("\n") || "—");
  }

  function cell(row, text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    row.appendChild(td);
    return td;
  }

  function renderPeers(peers) {
    const rows = peers.map((p) => {
      const tr = document.createElement("tr");
      tr.className = "peer-row";
      tr.dataset.peer = p.peer_id;
      const id = cell(tr, shortID(p.peer_id), "mono");
      id.title = p.peer_id;
      const dot = document.createElement("span");
      // How this node reaches the peer: models go over direct connections
      // only, so a relayed peer is not merged with.
      const path = p.path || (p.connected ? "direct" : "none");
      dot.className = path === "direct" ? "on" : path === "relayed" ? "relayed" : "off";
      dot.title = path === "direct" ? (p.hole_punched ? "direct (hole-punched)" : "direct")
        : path === "relayed" ? "relayed only: no models exchanged" : "not connected";
      id.prepend(dot);
      cell(tr, p.mode || "—");
      cell(tr, int(p.step), "num");
      cell(tr, compact(p.progress), "num");
      cell(tr, fixed(p.staleness, 1), "num" + (p.staleness > 50 ? " bad" : p.staleness > 10 ? " warn" : ""));
      cell(tr, p.reputation === null || p.reputation === undefined ? "—" : fixed(p.reputation, 2), "num");
      cell(tr, p.rtt_s > 0 ? seconds(p.rtt_s) : "—", "num");
      cell(tr, seconds(p.last_seen_s) + " ago", "num" + (p.last_seen_s > 30 ? " warn" : ""));
      cell(tr, int(p.merges), "num");
      cell(tr, fixed(p.loss, 4), "num");
      cell(tr, p.accuracy > 0 ? pct(p.accuracy, 2) : "—", "num");
      cell(tr, compact(p.samples_per_s), "num");
      return tr;
    });
    $("#peer-rows").replaceChildren(...rows);
    $("#peer-count").textContent = `(${peers.length})`;
    $("#no-peers").hidden = peers.length > 0;
  }

  // ---- polling -------------------------------------------------------------

  async function getJSON(path) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), TIMEOUT_MS);
    try {
      const r = await fetch(path, { signal: ctl.signal, cache: "no-store" });
      if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
      return await r.json();
    } finally {
      clearTimeout(timer);
    }
  }

  function setConn(state, text) {
    $("#conn").dataset.state = state;
    $("#conn-text").textContent = text;
  }

  let busy = false;
  async function poll() {
    if (busy || document.hidden) return;
    busy = true;
    try {
      const [status, history, peers] = await Promise.all([
        getJSON("/v1/status"), getJSON(`/v1/history?n=${HISTORY_N}`), getJSON("/v1/peers"),
      ]);
      renderStatus(status);
      lastHistory = history.points || [];
      drawCharts();
      renderPeers(peers.peers || []);
      setConn("live", "live · " + new Date().toLocaleTimeString());
    } catch (err) {
      setConn("down", "node unreachable, retrying (" + (err && err.message ? err.message : err) + ")");
    } finally {
      busy = false;
    }
  }

  window.addEventListener("resize", drawCharts);
  document.addEventListener("visibilitychange", poll);
  drawCharts();
  poll();
  setInterval(poll, POLL_MS);
})();
