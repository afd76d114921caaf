// The diff of two sides of traces: the levels with their totals, the items of one level (or of
// one layer or op) listed by their contribution to the difference, a waterfall of the largest
// (Plotly, served by the hub), and a drill-down layer → op → kernel that asks the API
// (`GET /api/v1/compare/traces/?…&level=…&parent=…`) for the items inside the row clicked.
// Every figure is printed as the server wrote it (`text`).
(function () {
  "use strict";
  const source = document.getElementById("diff-data");
  const root = document.getElementById("diff");
  if (!source || !root) return;
  const drills = JSON.parse(document.getElementById("diff-drills").textContent);
  const api = root.dataset.api;
  const plural = { stage: "stages", batch: "batches", layer: "layers", op: "ops", kernel: "kernels", counter: "counters" };
  const separator = " › ";
  // The rows drilled into, outermost first: {level, key, name}.
  let trail = [];
  let asked = 0;

  function element(tag, attributes, text) {
    const made = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) made.setAttribute(name, value);
    if (text !== undefined && text !== null) made.textContent = String(text);
    return made;
  }

  function go(level, parent) {
    const url = api + "&level=" + encodeURIComponent(level) + (parent ? "&parent=" + encodeURIComponent(parent) : "");
    const mine = ++asked;
    root.setAttribute("aria-busy", "true");
    fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then((response) => response.json().then((body) => ({ ok: response.ok, body })))
      .then(({ ok, body }) => {
        if (mine !== asked) return;
        root.removeAttribute("aria-busy");
        if (!ok) {
          document.getElementById("diff-largest").textContent = body.detail || "The diff could not be read.";
          return;
        }
        show(body);
      });
  }

  function levels(report) {
    const box = document.getElementById("diff-levels");
    box.replaceChildren();
    for (const entry of report.levels) {
      const label = plural[entry.level] + " (" + entry.items + ")" + (entry.text ? " " + entry.text.difference + " ms" : "");
      const button = element("button", { type: "button", class: "small", "data-level": entry.level }, label);
      button.setAttribute("aria-pressed", String(entry.level === report.level && !report.parent));
      button.addEventListener("click", () => {
        trail = [];
        go(entry.level, null);
      });
      box.append(button);
    }
  }

  function crumbs(report) {
    const box = document.getElementById("diff-crumbs");
    box.replaceChildren();
    const top = trail.length ? trail[0].level : report.level;
    const first = element("button", { type: "button" }, plural[top]);
    first.addEventListener("click", () => {
      trail = [];
      go(top, null);
    });
    box.append(first);
    trail.forEach((entry, position) => {
      box.append(separator);
      if (position === trail.length - 1) {
        box.append(element("strong", {}, entry.name + " — its " + plural[report.level]));
        return;
      }
      const back = element("button", { type: "button" }, entry.name);
      back.addEventListener("click", () => {
        trail = trail.slice(0, position + 1);
        go(drills[entry.level], entry.key);
      });
      box.append(back);
    });
  }

  function largest(report) {
    const line = document.getElementById("diff-largest");
    const item = report.items[0];
    if (!item) {
      line.textContent = "No " + plural[report.level] + " here. " + (report.note || "");
      return;
    }
    const what = report.level === "counter" ? "Largest difference: " : "Largest contributor: ";
    const amount = report.level === "counter" ? item.text.ratio : item.text.contribution + " ms per inference";
    line.textContent = what + item.key + " — " + amount + ", " + item.words;
    line.dataset.key = item.key;
  }

  function verdictClass(item) {
    return item.verdict ? item.verdict.split(" ")[0] : item.status;
  }

  function table(report) {
    const body = document.querySelector("#diff-items tbody");
    body.replaceChildren();
    const next = drills[report.level];
    report.items.forEach((item, position) => {
      const row = element("tr", { "data-key": item.key, "data-status": item.status, "data-children": next ? item.children : 0 });
      if (position === 0) {
        row.classList.add("selected");
        row.setAttribute("aria-selected", "true");
      }
      if (item.encloses) row.classList.add("encloses");
      const key = element("td", { class: "key mono small" });
      if (next && item.children) {
        const button = element("button", { type: "button", class: "span-link drill" }, item.name);
        button.setAttribute("aria-label", "Show the " + plural[next] + " of " + item.key);
        key.append(button, element("span", { class: "muted" }, " ▸ " + plural[next] + ": " + item.children));
      } else {
        key.append(element("span", {}, item.name));
      }
      if (item.parent && item.parent !== report.parent) key.append(element("span", { class: "muted parent" }, "in " + item.parent));
      if (item.status !== "matched") key.append(" ", element("span", { class: "badge warn" }, item.status));
      row.append(
        key,
        element("td", { class: "num small nowrap" }, item.text.a),
        element("td", { class: "num small nowrap" }, item.text.b),
        element("td", { class: "num small" }, item.text.ratio),
        element("td", { class: "small verdict " + verdictClass(item) }, item.words + (item.difference ? ", " + item.text.p_value : "")),
        element("td", { class: "num small" }, report.level === "counter" ? "—" : item.text.contribution),
        element("td", { class: "num small" }, item.text.calls)
      );
      if (next && item.children) {
        row.addEventListener("click", () => {
          trail.push({ level: report.level, key: item.key, name: item.name });
          go(next, item.key);
        });
      }
      body.append(row);
    });
    const more = report.items_total - report.items.length;
    document.getElementById("diff-more").textContent =
      (more > 0 ? "The " + report.items.length + " largest of " + report.items_total + " are listed; the totals count all. " : "") +
      (report.total && report.total.text
        ? "Time per inference of these " + plural[report.level] + " (innermost ones): A " + report.total.text.a + " ms, B " + report.total.text.b + " ms, B − A " + report.total.text.difference + " ms."
        : "");
  }

  function plot(report) {
    const target = document.getElementById("diff-waterfall");
    const bars = report.waterfall;
    if (typeof Plotly === "undefined") return;
    if (!bars || bars.labels.length < 2) {
      Plotly.purge(target);
      target.hidden = true;
      target.dataset.drawn = "0";
      return;
    }
    target.hidden = false;
    const height = 80 + 26 * bars.labels.length;
    target.style.minHeight = "";
    target.style.height = height + "px";
    const short = bars.labels.map((label) => {
      const last = label.split(separator).pop();
      return last.length > 28 ? last.slice(0, 27) + "…" : last;
    });
    Plotly.react(
      target,
      [
        {
          type: "waterfall",
          orientation: "h",
          measure: bars.measures,
          y: bars.labels,
          x: bars.values,
          text: bars.text,
          textposition: "auto",
          hovertext: bars.labels.map((label, index) => label + ": " + bars.text[index] + " ms"),
          hoverinfo: "text",
          increasing: { marker: { color: "#b42318" } },
          decreasing: { marker: { color: "#1a7f37" } },
          totals: { marker: { color: "#15324f" } },
          connector: { line: { color: "#8a96a8", width: 1 } },
        },
      ],
      {
        margin: { l: 10, r: 10, t: 10, b: 45 },
        height,
        showlegend: false,
        xaxis: { title: { text: "B − A, ms per inference" }, zeroline: true, automargin: true },
        yaxis: { type: "category", autorange: "reversed", tickvals: bars.labels, ticktext: short, automargin: true },
      },
      { responsive: true, displaylogo: false }
    );
    target.dataset.drawn = String(bars.labels.length);
  }

  function show(report) {
    root.dataset.level = report.level || "";
    root.dataset.parent = report.parent || "";
    levels(report);
    crumbs(report);
    largest(report);
    table(report);
    plot(report);
  }

  const first = JSON.parse(source.textContent);
  if (document.readyState === "complete") show(first);
  else window.addEventListener("load", () => show(first));
})();
