// The leaderboard's accuracy-against-latency plot, drawn with Plotly (served by the hub from
// the plotly package's own build): a point per published result, a colour per framework, and
// the Pareto front as a line. Clicking a point opens its evaluation.
(function () {
  "use strict";
  const holder = document.getElementById("pareto-plot");
  const source = document.getElementById("plot-data");
  if (!holder || !source) return;
  const plot = JSON.parse(source.textContent);

  function draw() {
    if (typeof Plotly === "undefined") {
      holder.textContent = "The plot could not be drawn (plotly.min.js did not load).";
      return;
    }
    const traces = Object.entries(plot.series).map(([framework, s]) => ({
      type: "scatter",
      mode: "markers",
      name: framework,
      x: s.x,
      y: s.y,
      text: s.text,
      customdata: s.url,
      marker: { size: 10, opacity: 0.85 },
      hovertemplate: "%{text}<br>p50 %{x:.3f} ms · " + plot.metric + " %{y:.4~g}" +
        (plot.unit ? " " + plot.unit : "") + "<extra></extra>",
    }));
    traces.push({
      type: "scatter",
      mode: "lines+markers",
      name: "Pareto front",
      x: plot.front.x,
      y: plot.front.y,
      line: { shape: "hv", dash: "dot", color: "#444" },
      marker: { symbol: "circle-open", size: 18, color: "#444" },
      hoverinfo: "skip",
    });
    const layout = {
      margin: { l: 60, r: 20, t: 10, b: 50 },
      xaxis: {
        title: { text: "p50 latency at batch size 1 (ms)" },
        type: "log",
        dtick: "D2",
        zeroline: false,
      },
      yaxis: {
        title: { text: plot.metric + (plot.unit ? " (" + plot.unit + ")" : "") },
        // An error (a regression's MAE): the best at the top, as accuracies are.
        autorange: plot.lower_is_better ? "reversed" : true,
      },
      legend: { orientation: "h", y: -0.2 },
      hovermode: "closest",
    };
    Plotly.newPlot(holder, traces, layout, { responsive: true, displaylogo: false });
    holder.on("plotly_click", (event) => {
      const url = event.points && event.points[0] && event.points[0].customdata;
      if (url) window.location.href = url;
    });
    holder.dataset.drawn = String(traces.length - 1);
  }

  if (document.readyState === "complete") draw();
  else window.addEventListener("load", draw);
})();
