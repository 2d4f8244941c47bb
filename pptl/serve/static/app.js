// pptl serve: the page. Every change plans on the server (POST /api/plan) and redraws.
// The URL hash holds the settings (the same parameters the API takes), so a view can be shared.
"use strict";

(function () {
  const $ = (sel) => document.querySelector(sel);
  const form = $("#form");
  const plot = $("#plot");
  const CLIENT = Math.random().toString(36).slice(2, 12);
  const DEBOUNCE_MS = 150;
  const PROGRESS_AFTER_MS = 150;
  let families = [];
  let seq = 0;
  let inflight = null;
  let debounce = null;
  let lastParams = null;

  // Timings of each redraw, for the browser test and bench/serve_latency.py.
  window.pptl = { timings: [], view: null };

  // -- fields <-> parameters ----------------------------------------------------------------

  function readParams() {
    const p = {};
    for (const el of form.elements) {
      if (!el.name) continue;
      if (el.type === "checkbox") p[el.name] = el.checked ? "1" : "0";
      else p[el.name] = el.value.trim();
    }
    return p;
  }

  function writeParams(p) {
    for (const [name, value] of Object.entries(p)) {
      if (name.startsWith("cost.") && !form.elements[name]) addCost(name.slice(5), value);
      const el = form.elements[name];
      if (!el) continue;
      if (el.type === "checkbox") el.checked = value === "1" || value === "true";
      else el.value = value;
    }
    describeFamily();
  }

  function addCost(kind, value) {
    const label = document.createElement("label");
    label.className = "field";
    label.dataset.field = "cost." + kind;
    label.innerHTML = "<span></span><input inputmode='decimal' spellcheck='false'><small class='err'></small>";
    label.querySelector("span").textContent = kind;
    const input = label.querySelector("input");
    input.name = "cost." + kind;
    input.id = "f-cost-" + kind;
    input.value = value;
    $("#costs").appendChild(label);
  }

  function hashParams() {
    const h = location.hash.replace(/^#/, "");
    if (!h) return null;
    const out = {};
    for (const [k, v] of new URLSearchParams(h)) out[k] = v;
    return out;
  }

  function query(p) {
    return new URLSearchParams(p).toString();
  }

  function family(name) {
    return families.find((f) => f.name === name);
  }

  function describeFamily() {
    const f = family(form.elements.schedule.value);
    $("#family-info").textContent = f ? f.summary + ". Needs: " + f.constraints + "." : "";
  }

  // A family that refuses one chunk per rank starts at vpp 2, and back (asked of the server).
  function fitVpp(selectName, vppName) {
    const f = family(form.elements[selectName].value);
    const el = form.elements[vppName];
    if (f && (el.value === "" || el.value === "1" || el.value === "2")) el.value = String(f.vpp);
  }

  // -- errors --------------------------------------------------------------------------------

  function clearErrors() {
    for (const el of form.querySelectorAll("[data-field]")) {
      el.classList.remove("invalid");
      const err = el.querySelector(".err");
      if (err) err.textContent = "";
    }
    $("#error-box").hidden = true;
  }

  function showError(body) {
    const where = body.field ? form.querySelector(`[data-field="${CSS.escape(body.field)}"]`) : null;
    if (where) {
      where.classList.add("invalid");
      where.querySelector(".err").textContent = body.error;
    } else {
      const box = $("#error-box");
      box.textContent = body.error;
      box.hidden = false;
    }
  }

  // -- planning ------------------------------------------------------------------------------

  function schedulePlan(delay) {
    clearTimeout(debounce);
    debounce = setTimeout(planNow, delay);
  }

  function setBusy(busy, text) {
    document.body.dataset.state = busy ? "busy" : document.body.dataset.state;
    $("#progress").hidden = !busy;
    if (text !== undefined) $("#progress-text").textContent = text;
  }

  async function planNow() {
    const params = readParams();
    history.replaceState(null, "", "#" + query(params));
    $("#share").href = location.href;
    if (inflight) inflight.abort(); // a newer change wins; the server drops the stale request too
    const controller = new AbortController();
    inflight = controller;
    const mySeq = ++seq;
    const t0 = performance.now();
    document.body.dataset.state = "busy";
    const what = `planning ${params.schedule} pp=${params.pp} × ${params.microbatches} micro-batches`;
    const ticker = setInterval(() => {
      const s = (performance.now() - t0) / 1000;
      if (s * 1000 >= PROGRESS_AFTER_MS) setBusy(true, `${what}… ${s.toFixed(1)} s`);
    }, 100);
    let res, body;
    try {
      res = await fetch("/api/plan", {
        method: "POST", signal: controller.signal, headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ params, client: CLIENT, seq: mySeq }),
      });
      body = await res.json();
    } catch (e) {
      clearInterval(ticker);
      if (e.name === "AbortError") return; // replaced by a newer change
      finish(mySeq, "error");
      showError({ error: "the server did not answer: " + e.message, field: null });
      return;
    }
    clearInterval(ticker);
    if (mySeq !== seq || res.status === 409) return;
    const tServer = performance.now();
    clearErrors();
    if (!res.ok) {
      showError(body);
      finish(mySeq, "error");
      return;
    }
    lastParams = params;
    const blocks = body.figure.blocks || 0;
    if (body.figure.data && blocks > 3000) {
      setBusy(true, `drawing ${blocks.toLocaleString()} blocks…`);
      await new Promise((r) => setTimeout(r, 0)); // let the message paint before plotly works
      if (mySeq !== seq) return;
    }
    const tDraw = performance.now();
    await draw(body);
    const tEnd = performance.now();
    const timing = {
      seq: mySeq, server_ms: body.server_ms, fetch_ms: Math.round(tServer - t0),
      render_ms: Math.round(tEnd - tDraw), total_ms: Math.round(tEnd - t0), blocks,
    };
    window.pptl.timings.push(timing);
    window.pptl.view = body;
    $("#status").textContent = `planned in ${Math.round(body.server_ms)} ms · drawn in ${timing.render_ms} ms · ` +
      `${timing.total_ms} ms in all`;
    finish(mySeq, "idle");
  }

  function finish(mySeq, state) {
    if (mySeq !== seq) return;
    setBusy(false);
    document.body.dataset.state = state;
    document.body.dataset.done = String(mySeq);
  }

  // -- drawing -------------------------------------------------------------------------------

  async function draw(body) {
    const fig = body.figure;
    const note = $("#figure-note");
    if (fig.data) {
      note.hidden = true;
      const layout = Object.assign({}, fig.layout, { autosize: true });
      await Plotly.react(plot, fig.data, layout, {
        displaylogo: false, responsive: true, scrollZoom: true,
        // offline: nothing may send the plan to Plotly's cloud, whatever plotly.js's defaults
        showSendToCloud: false, modeBarButtonsToRemove: ["sendDataToCloud"],
        plotlyServerURL: "",
        toImageButtonOptions: { filename: "pptl-" + (body.a.family || "plan") },
      });
    } else {
      Plotly.purge(plot);
      note.textContent = fig.note;
      note.hidden = false;
    }
    panel($("#panel-a"), body.a, "a");
    const b = $("#panel-b");
    if (body.b) {
      panel(b, body.b, "b");
      b.hidden = false;
    } else {
      b.hidden = true;
      b.replaceChildren();
    }
    if (body.compare_error) showError(body.compare_error);
  }

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else e.setAttribute(k, v);
    }
    for (const c of children) e.append(c);
    return e;
  }

  const num = (x) => (Number.isInteger(x) ? String(x) : Number(x.toPrecision(6)).toString());
  const pct = (x) => (100 * x).toFixed(1) + "%";

  function panel(root, p, which) {
    const kpis = el("div", { class: "kpis" },
      kpi("makespan", num(p.makespan) + (p.units !== "unit" ? " " + p.units : "")),
      kpi("bubble", pct(p.bubble)), kpi("peak activation", num(p.peak)), kpi("ops", p.ops.toLocaleString()));
    const formula = el("p", { class: "formula" });
    if (p.textbook !== null && p.textbook !== undefined) {
      formula.append("textbook bubble per rank ", el("b", { class: "textbook" }, num(p.textbook)),
        " · simulated (max idle) ", el("b", { class: "simulated" }, num(p.simulated_idle)),
        el("br", {}), el("code", {}, p.formula));
    } else {
      formula.append("simulated idle per rank (max) ", el("b", { class: "simulated" }, num(p.simulated_idle)),
        " · no textbook formula for this case");
    }
    let checks;
    if (p.violations.length) {
      checks = el("ul", { class: "violations" });
      for (const v of p.violations) {
        checks.append(el("li", { class: v.severity }, el("code", {}, v.code), v.severity + ": " + v.message));
      }
    } else {
      checks = el("p", { class: "valid" }, "✓ every check passes");
    }
    const table = el("table", { class: "ranks" });
    table.append(el("tr", {}, ...["rank", "busy", "idle", "bubble", "", "peak act."].map((h) => el("th", {}, h))));
    for (const r of p.ranks) {
      const bar = el("div", {});
      bar.style.width = Math.max(1, Math.round(100 * r.bubble)) + "%";
      table.append(el("tr", {}, el("td", {}, String(r.rank)), el("td", {}, num(r.busy)), el("td", {}, num(r.idle)),
        el("td", {}, pct(r.bubble)), el("td", { class: "bar" }, bar), el("td", {}, num(r.peak))));
    }
    const q = query(Object.assign({ which }, lastParams));
    const dl = el("div", { class: "downloads" }, "download: ");
    const refused = [];
    const unavailable = p.unavailable || {};
    for (const [what, label] of [["plan", "plan JSON"], ["png", "PNG"], ["svg", "SVG"], ["csv", "torch CSV"]]) {
      if (unavailable[what]) { // a link the server would refuse: say why instead of a silently failed download
        dl.append(el("span", { class: "off", title: unavailable[what], "data-download": what }, label));
        refused.push(el("p", { class: "hint refused", "data-refused": what }, `no ${label}: ${unavailable[what]}`));
      } else {
        dl.append(el("a", { href: `/api/download/${what}?${q}`, download: "", "data-download": what }, label));
      }
    }
    root.replaceChildren(el("h2", {}, p.title), kpis, formula, checks, table, dl, ...refused);
  }

  function kpi(label, value) {
    return el("div", { class: "kpi", "data-kpi": label.split(" ")[0] }, el("b", {}, value), el("span", {}, label));
  }

  // -- start ---------------------------------------------------------------------------------

  async function start() {
    const res = await fetch("/api/init");
    const init = await res.json();
    families = init.families;
    const sel = form.elements.schedule;
    const cmp = form.elements.compare;
    for (const f of families) {
      sel.append(el("option", { value: f.name }, f.name));
      cmp.append(el("option", { value: f.name }, f.name));
    }
    const fromHash = hashParams();
    writeParams(Object.assign({}, init.params, fromHash || {}));
    form.addEventListener("input", (e) => {
      if (e.target.tagName === "INPUT" && e.target.type !== "checkbox") schedulePlan(DEBOUNCE_MS);
    });
    form.addEventListener("change", (e) => {
      if (e.target.name === "schedule") { fitVpp("schedule", "vpp"); describeFamily(); }
      if (e.target.name === "compare") fitVpp("compare", "compare_vpp");
      if (e.target.tagName === "SELECT" || e.target.type === "checkbox") schedulePlan(0);
    });
    form.addEventListener("submit", (e) => { e.preventDefault(); schedulePlan(0); });
    window.addEventListener("hashchange", () => {
      const p = hashParams();
      if (p && query(p) !== query(readParams())) { writeParams(p); schedulePlan(0); }
    });
    planNow();
  }

  window.addEventListener("DOMContentLoaded", () => {
    start().catch((e) => showError({ error: "the page could not start: " + e.message, field: null }));
  });
})();
