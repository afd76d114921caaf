// The divergence page: while its capture runs go, it asks the API every few seconds and
// reloads once the divergence is done or failed; once done, the relative error of each
// layer's output is plotted (log scale) with the first diverging layer marked.
(() => {
  const root = document.getElementById("divergence");
  if (!root) return;
  if (root.dataset.status === "pending") {
    const ask = async () => {
      try {
        const answer = await fetch(root.dataset.api, { headers: { Accept: "application/json" } });
        if (answer.ok && (await answer.json()).status !== "pending") {
          window.location.reload();
          return;
        }
      } catch (_) {
        // The hub restarting: ask again later.
      }
      window.setTimeout(ask, 3000);
    };
    window.setTimeout(ask, 3000);
    return;
  }
  const source = document.getElementById("divergence-data");
  const target = document.getElementById("divergence-plot");
  if (!source || !target || typeof Plotly === "undefined") return;
  const plot = JSON.parse(source.textContent);
  // A relative error of exactly 0 sits at the plot's floor on a log scale.
  const floor = 1e-12;
  const y = plot.relative.map((value) => Math.max(value, floor));
  const colors = plot.names.map((name) => (name === plot.first ? "#c0392b" : "#2c6fbb"));
  const traces = [
    { type: "scatter", mode: "lines+markers", name: "relative error", x: plot.names, y, marker: { color: colors, size: 7 } },
  ];
  const shapes = plot.tolerance
    ? [{ type: "line", xref: "paper", x0: 0, x1: 1, y0: plot.tolerance, y1: plot.tolerance, line: { dash: "dot", color: "#888" } }]
    : [];
  Plotly.newPlot(
    target,
    traces,
    {
      margin: { t: 10, r: 10, b: 120, l: 60 },
      yaxis: { type: "log", title: "relative error", exponentformat: "power" },
      xaxis: { type: "category", tickangle: -45, automargin: true },
      shapes,
      showlegend: false,
    },
    { responsive: true, displaylogo: false },
  );
  target.dataset.drawn = String(plot.names.length);
})();
