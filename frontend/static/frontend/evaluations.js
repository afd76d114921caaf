// The evaluations page: the "Compare selected" button (two to eight ticked rows), and live
// rows: /ws/evaluations/ sends every status change of the user's evaluations; a row on the
// page gets its new status (and, once it succeeded, its top-1 and a box to compare it); an
// evaluation not on the page is counted in a notice that reloads the page to show it.
(function () {
  "use strict";
  const form = document.getElementById("compare-form");
  const button = document.getElementById("compare-button");
  const hint = document.getElementById("compare-hint");
  const table = document.getElementById("evaluations");
  if (!form || !table) return;

  function ticked() {
    return Array.from(form.querySelectorAll('input[name="evaluations"]:checked'));
  }
  function refresh() {
    const count = ticked().length;
    button.disabled = count < 2 || count > 8;
    hint.textContent =
      count > 8 ? "At most eight." : count < 2 ? "Tick two to eight evaluations." : count + " selected.";
  }
  form.addEventListener("change", refresh);
  refresh();

  const live = document.getElementById("live");
  const notice = document.getElementById("new-evaluations");
  const unseen = new Set();
  function percent(value) {
    return typeof value === "number" ? (value * 100).toFixed(2) + " %" : "—";
  }
  function apply(evaluation) {
    if (!evaluation || !evaluation.id) return;
    const row = table.querySelector('tr[data-evaluation="' + evaluation.id + '"]');
    if (!row) {
      unseen.add(evaluation.id);
      notice.hidden = false;
      notice.innerHTML = "";
      const link = document.createElement("a");
      link.href = window.location.href;
      link.textContent = unseen.size + " evaluation" + (unseen.size > 1 ? "s" : "") + " changed or launched: show";
      notice.appendChild(link);
      return;
    }
    const status = row.querySelector('[data-field="status"]');
    if (status && evaluation.status) {
      status.textContent = evaluation.status;
      status.className = "status " + evaluation.status;
    }
    const top1 = row.querySelector('[data-field="top1"]');
    if (top1 && evaluation.accuracy) {
      const value = evaluation.accuracy.top1;
      if (value === null && evaluation.status === "succeeded") {
        top1.textContent = "latency only";  // timed, not scored
      } else {
        // A regression's first metric is its mean absolute error, in the target's units.
        top1.textContent = evaluation.task === "regression" && typeof value === "number"
          ? Number(value.toPrecision(4)).toString() : percent(value);
      }
    }
    const box = row.querySelector('input[name="evaluations"]');
    if (box && evaluation.status === "succeeded") {
      box.disabled = false;
      box.removeAttribute("title");
    }
    if (evaluation.status === "succeeded") refreshRow(evaluation.id);
    row.dataset.updated = "1";
  }

  // Rows' result cells as the hub renders them now (the latency with its interval, the metric
  // by task), once their evaluations have results: one read of the page for every row that
  // finished within a second.
  const finishedRows = new Set();
  let pending = null;
  function refreshRow(id) {
    finishedRows.add(id);
    if (pending === null) pending = setTimeout(refreshRows, 1000);
  }
  function refreshRows() {
    const ids = Array.from(finishedRows);
    finishedRows.clear();
    pending = null;
    fetch(window.location.href, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (!html) return;
        const page = new DOMParser().parseFromString(html, "text/html");
        ids.forEach(function (id) {
          const fresh = page.querySelector('#evaluations tr[data-evaluation="' + id + '"]');
          const row = table.querySelector('tr[data-evaluation="' + id + '"]');
          if (!fresh || !row) return;
          ["top1", "latency"].forEach(function (field) {
            const now = fresh.querySelector('[data-field="' + field + '"]');
            const cell = row.querySelector('[data-field="' + field + '"]');
            if (now && cell) cell.innerHTML = now.innerHTML;
          });
          row.dataset.refreshed = "1";
        });
      })
      .catch(function () { /* the rows keep what they had; a reload shows the rest */ });
  }

  const path = table.dataset.socket;
  if (!path || !window.WebSocket) return;
  const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
  let delay = 1000;
  function connect() {
    const socket = new WebSocket(scheme + window.location.host + path);
    socket.addEventListener("open", function () {
      delay = 1000;
      if (live) {
        live.classList.add("on");
        live.querySelector(".text").textContent = "live";
      }
    });
    socket.addEventListener("message", function (message) {
      let event;
      try {
        event = JSON.parse(message.data);
      } catch (error) {
        return;
      }
      if (event.type === "snapshot") return; // the page was rendered from the same state
      if (event.evaluation) apply(event.evaluation);
      else if (event.type === "progress") {
        const row = table.querySelector('tr[data-evaluation="' + event.id + '"]');
        const status = row && row.querySelector('[data-field="status"]');
        if (status && event.status) {
          status.textContent = event.status;
          status.className = "status " + event.status;
        }
      }
    });
    socket.addEventListener("close", function (event) {
      if (live) {
        live.classList.remove("on");
        live.querySelector(".text").textContent = "offline";
      }
      if (event.code >= 4400 && event.code < 4500) return; // refused: do not retry
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 30000);
    });
  }
  connect();
})();
