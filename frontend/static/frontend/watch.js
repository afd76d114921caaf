// A watch's series, drawn with Plotly (served by the hub): each run's median latency with the
// 95 % interval of the median, the regressions and improvements marked, each point's verdict
// and what changed in its hover text. The server hands the runs over in #watch-plots.
(function () {
  "use strict";
  const source = document.getElementById("watch-plots");
  if (!source) return;
  const plots = JSON.parse(source.textContent);
  const config = { responsive: true, displaylogo: false };
  const marks = {
    regression: { symbol: "triangle-up", color: "#b42318", name: "regression" },
    improvement: { symbol: "triangle-down", color: "#067647", name: "improvement" },
  };
  const hover = (run) => run.words + (run.changed ? "<br>changed: " + run.changed : "");

  function draw() {
    if (typeof Plotly === "undefined") return;
    for (const plot of plots) {
      const element = document.getElementById("watch-plot-" + plot.id);
      if (!element || !plot.runs.length) continue;
      const runs = plot.runs;
      const traces = [
        {
          type: "scatter",
          mode: "lines+markers",
          name: "median",
          x: runs.map((r) => r.number),
          y: runs.map((r) => r.median),
          text: runs.map(hover),
          hovertemplate: "run %{x}: %{y:.4g} ms<br>%{text}<extra></extra>",
          error_y: {
            type: "data",
            symmetric: false,
            array: runs.map((r) => (r.high === null ? 0 : r.high - r.median)),
            arrayminus: runs.map((r) => (r.low === null ? 0 : r.median - r.low)),
            visible: true,
          },
          marker: { color: "#3b5bdb", size: 7 },
          line: { color: "#9fb0e8" },
        },
      ];
      let called = 0;
      for (const [verdict, mark] of Object.entries(marks)) {
        const hits = runs.filter((r) => r.verdict === verdict);
        called += hits.length;
        if (!hits.length) continue;
        traces.push({
          type: "scatter",
          mode: "markers",
          name: mark.name,
          x: hits.map((r) => r.number),
          y: hits.map((r) => r.median),
          text: hits.map(hover),
          hovertemplate: "run %{x}: %{y:.4g} ms<br>%{text}<extra></extra>",
          marker: { symbol: mark.symbol, size: 15, color: mark.color },
        });
      }
      Plotly.newPlot(
        element,
        traces,
        {
          margin: { l: 60, r: 20, t: 10, b: 45 },
          xaxis: { title: { text: "run" }, dtick: 1, zeroline: false },
          yaxis: { title: { text: "median latency (ms)" }, zeroline: false },
          legend: { orientation: "h", y: -0.3 },
          hovermode: "closest",
        },
        config
      );
      element.dataset.drawn = String(runs.length);
      element.dataset.marked = String(called);
    }
  }

  if (document.readyState === "complete") draw();
  else window.addEventListener("load", draw);
})();
