// The comparison's plots, drawn with Plotly (served by the hub): median latency against batch
// size with the 95 % interval of the median, throughput against batch size, and, across systems,
// the latency normalised to the reference host.
(function () {
  "use strict";
  const source = document.getElementById("compare-plots");
  if (!source) return;
  const plots = JSON.parse(source.textContent);
  const config = { responsive: true, displaylogo: false };
  const axis = (title, log) => ({ title: { text: title }, type: log ? "log" : "linear", zeroline: false });
  const layout = (x, y, logY) => ({
    margin: { l: 60, r: 20, t: 10, b: 50 },
    xaxis: { ...axis(x, true), dtick: "D1" },
    yaxis: axis(y, logY),
    legend: { orientation: "h", y: -0.25 },
    hovermode: "closest",
  });

  function draw() {
    if (typeof Plotly === "undefined") return;
    const latency = document.getElementById("latency-plot");
    Plotly.newPlot(
      latency,
      plots.latency.map((s) => ({
        type: "scatter",
        mode: "lines+markers",
        name: s.name,
        x: s.x,
        y: s.y,
        error_y: { type: "data", symmetric: false, array: s.error, arrayminus: s.error_minus, visible: true },
      })),
      layout("batch size", "median latency (ms)", true),
      config
    );
    latency.dataset.drawn = String(plots.latency.length);
    const throughput = document.getElementById("throughput-plot");
    Plotly.newPlot(
      throughput,
      plots.latency.map((s) => ({ type: "scatter", mode: "lines+markers", name: s.name, x: s.x, y: s.throughput })),
      layout("batch size", "throughput (inputs/s)", true),
      config
    );
    throughput.dataset.drawn = String(plots.latency.length);
    const systems = document.getElementById("systems-plot");
    if (systems && plots.systems.length) {
      Plotly.newPlot(
        systems,
        plots.systems.map((s) => ({ type: "scatter", mode: "lines+markers", name: s.name, x: s.x, y: s.y })),
        layout("batch size", "p50 latency / " + plots.reference + "'s", false),
        config
      );
      systems.dataset.drawn = String(plots.systems.length);
    }
  }

  if (document.readyState === "complete") draw();
  else window.addEventListener("load", draw);
})();
