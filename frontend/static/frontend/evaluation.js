// Evaluation page: keeps the status, progress, history and results current without a reload.
// The page embeds the evaluation as GET /api/v1/evaluations/<id>/ shows it; the WebSocket
// /ws/evaluations/<id>/ sends a snapshot of the same shape and then every event. Only when the
// socket closes before the evaluation finishes does the page poll the REST endpoint instead.
(function () {
  "use strict";
  var script = document.getElementById("evaluation-script");
  var state = JSON.parse(document.getElementById("evaluation-data").textContent);
  var FINISHED = ["succeeded", "failed", "cancelled"];
  var POLL_MS = 2000;
  var polling = false;

  function $(id) { return document.getElementById(id); }
  function finished() { return FINISHED.indexOf(state.status) >= 0; }
  function when(iso) { return iso ? iso.replace("T", " ").slice(0, 19) : "—"; }
  function el(tag, text, className) {
    var node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }
  function ms(value) { return typeof value === "number" ? value.toFixed(value < 10 ? 3 : 1) : "—"; }
  function percent(value) { return typeof value === "number" ? (value * 100).toFixed(2) + " %" : "—"; }

  function setLive(mode, text) {
    var live = $("live");
    live.className = "live " + mode;
    live.querySelector(".text").textContent = text;
  }

  function renderStatus() {
    var badge = $("status");
    badge.className = "status " + state.status;
    badge.textContent = state.status;
    $("status-reason").textContent = state.reason || "";
    document.title = document.title.replace(/^\[[a-z]+\] /, "");
    if (!finished()) document.title = "[" + state.status + "] " + document.title;

    var done = state.progress ? state.progress.done : 0;
    var total = state.progress ? state.progress.total : 0;
    var bar = $("progress");
    var share = total ? done / total : (state.status === "succeeded" ? 1 : 0);
    bar.querySelector("span").style.width = (share * 100).toFixed(1) + "%";
    bar.setAttribute("aria-valuenow", String(done));
    bar.setAttribute("aria-valuemax", String(total));
    $("progress-text").textContent = total
      ? done + " of " + total + " predictions (" + Math.floor(share * 100) + " %)"
      : (finished() ? "" : "waiting for a host to start it…");

    $("fact-host").textContent = state.host || "—";
    $("fact-framework-version").textContent = state.framework_version || "—";
    $("fact-attempts").textContent = String(state.attempts);
    $("fact-started").textContent = when(state.started_at);
    $("fact-finished").textContent = when(state.finished_at);

    var form = $("cancel-form");  // only its owner may cancel: absent for anyone else
    if (form) {
      form.hidden = finished();
      var cancel = $("cancel-button");
      cancel.disabled = !!state.cancel_requested;
      cancel.textContent = state.cancel_requested ? "Cancelling…" : "Cancel";
    }
  }

  function renderHistory() {
    var rows = (state.history || []).map(function (change) {
      var row = el("tr");
      row.append(el("td", when(change.at).slice(11), "nowrap"));
      var cell = el("td");
      cell.append(el("span", change.status, "status " + change.status));
      row.append(cell, el("td", change.reason, "reason"), el("td", change.host || "—"),
        el("td", change.attempt, "num"));
      return row;
    });
    $("history").querySelector("tbody").replaceChildren.apply(
      $("history").querySelector("tbody"), rows);
  }

  function pair(list, term, value) {
    if (value === undefined || value === null || value === "") return;
    list.append(el("dt", term), el("dd", value));
  }

  function renderResult() {
    var result = state.result;
    $("results").hidden = !result;
    if (!result) return;
    var accuracy = $("accuracy");
    accuracy.replaceChildren();
    var details = result.details || {};
    // Top-5 says nothing for five classes or fewer (null then).
    var metrics = [["Top-1", percent(result.accuracy.top1)]];
    if (typeof result.accuracy.top5 === "number") metrics.push(["Top-5", percent(result.accuracy.top5)]);
    metrics.push(["Inputs", result.accuracy.count]);
    if ((details.model || {}).task === "sequence_labelling" && details.accuracy) {
      // Frame-level metrics (scikit-learn's), and for a stateful model the accuracy it has
      // when its state is reset at every call.
      var frames = details.accuracy, reset = details.accuracy_state_reset;
      var number = function (v) { return typeof v === "number" ? v.toFixed(4) : "—"; };
      metrics = [["Accuracy" + (reset ? " (state carried)" : ""), percent(frames.top1)]];
      if (reset) metrics.push(["Accuracy (state reset)", percent(reset.top1)]);
      metrics.push(["Precision", number(frames.precision)], ["Recall", number(frames.recall)],
        ["F1", number(frames.f1)], ["ROC AUC", number(frames.roc_auc)],
        ["Inputs", result.accuracy.count]);
    }
    if ((details.model || {}).task === "object_detection" && details.accuracy) {
      // COCO's box metrics, as pycocotools computed them on the agent.
      var coco = details.accuracy;
      var fixed = function (v) { return typeof v === "number" && v >= 0 ? v.toFixed(4) : "—"; };
      metrics = [["mAP (IoU .50:.95)", fixed(coco.map)], ["mAP@.50", fixed(coco.map_50)],
        ["mAP@.75", fixed(coco.map_75)], ["AR@100", fixed(coco.mar_100)],
        ["Images", result.accuracy.count], ["Objects", coco.objects]];
    }
    if ((details.model || {}).task === "semantic_segmentation" && details.accuracy) {
      // Per pixel, from the confusion matrix (ignore-label pixels left out).
      var seg = details.accuracy;
      metrics = [["mIoU", typeof seg.miou === "number" ? seg.miou.toFixed(4) : "—"],
        ["Pixel accuracy", percent(seg.pixel_accuracy)],
        ["Mean class accuracy", percent(seg.mean_class_accuracy)],
        ["Images", result.accuracy.count]];
      Object.keys(seg.iou || {}).forEach(function (label) {
        var value = seg.iou[label];
        metrics.push(["IoU " + label, typeof value === "number" ? value.toFixed(4) : "—"]);
      });
    }
    if ((details.model || {}).task === "multi_label_classification" && details.accuracy) {
      // scikit-learn's: mAP needs no threshold; the rest count a class where its
      // probability reaches the output's threshold.
      var tags = details.accuracy;
      var four = function (v) { return typeof v === "number" ? v.toFixed(4) : "—"; };
      metrics = [["mAP", four(tags.map)], ["mAP (micro)", four(tags.map_micro)],
        ["F1 (micro)", four(tags.f1_micro)], ["F1 (macro)", four(tags.f1_macro)],
        ["Exact match", percent(tags.exact_match)], ["Hamming loss", four(tags.hamming_loss)],
        ["Threshold", String(tags.threshold)], ["Inputs", result.accuracy.count]];
      Object.keys(tags.average_precision || {}).forEach(function (label) {
        metrics.push(["AP " + label, four(tags.average_precision[label])]);
      });
    }
    if ((details.model || {}).task === "regression" && details.accuracy) {
      // Errors in the target's units (lower is better), and R² (1 is a perfect fit).
      var fit = details.accuracy;
      var sig = function (v) { return typeof v === "number" ? Number(v.toPrecision(4)).toString() : "—"; };
      metrics = [["MAE", sig(fit.mae)], ["RMSE", sig(fit.rmse)], ["R²", sig(fit.r2)],
        ["Max error", sig(fit.max_error)], ["Inputs", result.accuracy.count]];
      var values = Object.keys(fit.per_value || {});
      if (values.length > 1) {
        values.forEach(function (label) {
          metrics.push(["MAE " + label, sig(fit.per_value[label].mae)]);
        });
      }
    }
    if (result.accuracy.top1 === null) {
      // A latency-only evaluation: timed, not scored.
      metrics = [["Accuracy", "not scored (latency only)"], ["Inputs timed", result.accuracy.count]];
    }
    metrics.forEach(function (metric) {
      var box = el("div", null, "metric-box");
      box.append(el("span", metric[0], "label"), el("strong", metric[1], "value"));
      accuracy.append(box);
    });

    // Measurement hygiene: the run's labelled warnings (more threads than cores, a loaded
    // machine, a wide spread, too few samples for a p99, a warm-up that had not converged).
    var hygiene = $("hygiene");
    var warnings = (details.hygiene || []).filter(function (w) { return w && w.message; });
    // The tracing overhead of this run: its traced calls against the same calls untraced.
    var overhead = (details.trace || {}).overhead;
    var overheadText = "";
    if (overhead && overhead.measured && typeof overhead.overhead === "number") {
      overheadText = "Tracing overhead at level " + overhead.level + ": " +
        (overhead.overhead >= 0 ? "+" : "") + (overhead.overhead * 100).toFixed(1) + " % (p50 " +
        ms(overhead.traced_p50_ms) + " ms traced, " + ms(overhead.untraced_p50_ms) +
        " ms untraced, batch size " + overhead.batch_size + ", " + overhead.calls + " calls)";
    } else if (overhead && overhead.reason) {
      overheadText = "Tracing overhead: not measured (" + overhead.reason + ")";
    }
    $("tracing-overhead").textContent = overheadText;
    hygiene.hidden = warnings.length === 0 && !overheadText;
    hygiene.querySelector("ul").replaceChildren.apply(hygiene.querySelector("ul"),
      warnings.map(function (w) {
        var item = el("li", null, "notice warn");
        item.dataset.code = w.code;
        item.append(el("strong", w.code.replace(/_/g, " ") + ": "), document.createTextNode(w.message));
        return item;
      }));

    renderTheoretical(details);
    renderLoadgen(details);

    var sizes = Object.keys(result.latency || {}).sort(function (a, b) { return a - b; });
    var rows = sizes.map(function (size) {
      var l = result.latency[size];
      var row = el("tr");
      row.dataset.batchSize = size;
      row.append(el("th", size, "num"));
      ["mean_ms", "p50_ms", "p90_ms", "p99_ms", "min_ms", "max_ms", "std_ms"].forEach(function (key) {
        row.append(el("td", ms(l[key]), "num"));
      });
      row.append(el("td", l.count, "num"));
      // The first call at the batch size, cold, apart from the warm latency.
      var entry = (details.batch_sizes || []).filter(function (b) { return String(b.batch_size) === size; })[0];
      row.append(el("td", entry && typeof entry.first_call_ms === "number" ? ms(entry.first_call_ms) : "—", "num"));
      var throughput = result.throughput ? result.throughput[size] : null;
      row.append(el("td", typeof throughput === "number" ? throughput.toFixed(1) : "—", "num"));
      return row;
    });
    $("latency").querySelector("tbody").replaceChildren.apply(
      $("latency").querySelector("tbody"), rows);

    var stack = $("stack");
    var s = result.stack || {};
    stack.replaceChildren();
    pair(stack, "Host", result.host || s.host);
    pair(stack, "Architecture", s.architecture);
    if (s.cpu) pair(stack, "CPU", [s.cpu.model, s.cpu.usable_cores && s.cpu.usable_cores + " usable cores"].filter(Boolean).join(", "));
    if (s.memory_bytes) pair(stack, "Memory", (s.memory_bytes / Math.pow(2, 30)).toFixed(1) + " GiB");
    (s.gpus || []).forEach(function (gpu) {
      pair(stack, "GPU " + gpu.index, [gpu.name, gpu.memory_bytes && (gpu.memory_bytes / Math.pow(2, 30)).toFixed(0) + " GiB",
        gpu.cuda_driver && "CUDA " + gpu.cuda_driver].filter(Boolean).join(", "));
    });
    if (s.os) pair(stack, "OS", s.os.platform || s.os.system);
    if (s.python) pair(stack, "Python", s.python.version);
    pair(stack, "NumPy", s.numpy);
    if (s.container && s.container.image) {
      // The image an agent with --docker ran it in, and its digest (the stack's identity).
      pair(stack, "Container image", s.container.image +
        (s.container.digest ? " (" + s.container.digest.slice(0, 19) + ")" : ""));
    }
    Object.keys(s.frameworks || {}).forEach(function (name) {
      pair(stack, name, s.frameworks[name]);
    });
    pair(stack, "Manifest sha256", result.content_hash);
  }

  // Theoretical performance: the model's multiply-adds and parameters per layer (counted from
  // its graph), the FLOP/s each batch size achieved, and both on the device's roofline (its
  // peak compute and bandwidth as the run measured them). With a trace at level framework the
  // layers' own FLOP/s come from the trace's per-layer means at the smallest batch size (on a
  // GPU, at level system_library, from the kernels correlated to each layer).
  var layerTimes = null, layerTimesFor = null;

  function si(value) {
    var units = [["G", 1e9], ["M", 1e6], ["K", 1e3]];
    for (var i = 0; i < units.length; i++) {
      if (Math.abs(value) >= units[i][1]) return (value / units[i][1]).toFixed(3) + " " + units[i][0];
    }
    return String(value);
  }

  function intensity(macs, activationBytes, weightBytes, batch) {
    var moved = activationBytes * batch + weightBytes;
    return macs && moved ? 2 * macs * batch / moved : null;
  }

  function readLayerTimes(traceId) {
    layerTimesFor = traceId;
    fetch("/api/v1/traces/" + encodeURIComponent(traceId) + "/layers",
      { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (body) {
        if (!body) return;
        layerTimes = (body.aggregates || []).filter(function (row) { return row.level === "framework"; });
        renderTheoretical((state.result || {}).details || {});
      })
      .catch(function () { /* the table shows no achieved FLOP/s then */ });
  }

  function renderTheoretical(details) {
    var t = details.theoretical;
    var box = $("theoretical");
    box.hidden = !t;
    if (!t) return;
    var summary = $("theoretical-summary"), rooflineText = $("roofline-summary");
    var plot = $("roofline-plot"), layersBox = $("theoretical-details");
    if (!t.counted) {
      summary.textContent = "Not counted: " + t.reason;
      rooflineText.textContent = "";
      plot.hidden = true;
      layersBox.hidden = true;
      return;
    }
    var layers = t.layers || [];
    var activations = 0, weights = 0;
    layers.forEach(function (layer) { activations += layer.activation_bytes; weights += layer.weight_bytes; });
    var shapes = Object.keys(t.input_shapes || {}).map(function (name) {
      return name + " [" + t.input_shapes[name].join(", ") + "]";
    }).join(", ");
    var achieved = (t.achieved || []).map(function (a) {
      return a.gflops_per_s.toFixed(2) + " GFLOP/s at batch size " + a.batch_size;
    });
    summary.textContent = si(t.macs) + " multiply-adds (" + si(t.flops) + "FLOPs) and " +
      t.params.toLocaleString("en") + " parameters per input (" + shapes + ", counted from the " +
      t.framework + " graph)" + (achieved.length ? "; achieved at the p50 latency: " + achieved.join(", ") : "") + ".";

    var roof = t.roofline || {};
    var smallest = null;  // the smallest batch size's
    (t.achieved || []).forEach(function (a) {
      if (!smallest || a.batch_size < smallest.batch_size) smallest = a;
    });
    if ((t.uncounted_layers || []).length) {
      summary.textContent += " " + t.uncounted_layers.length + " layers that multiply-add have " +
        "shapes that could not be inferred and count none: the total is a lower bound.";
    }
    if (roof.measured) {
      var share = smallest ? " At batch size " + smallest.batch_size + " the model reached " +
        (100 * smallest.gflops_per_s / roof.peak_gflops_per_s).toFixed(1) + " % of that peak." : "";
      rooflineText.textContent = "Roofline of " + roof.device + " as the run measured it: peak " +
        roof.peak_gflops_per_s + " GFLOP/s, bandwidth " + roof.bandwidth_gb_per_s + " GB/s, ridge at " +
        roof.ridge_flop_per_byte + " FLOP/byte (" + roof.method + ")." + share;
    } else {
      rooflineText.textContent = "No roofline: " + (roof.reason || "the device was not measured") + ".";
    }

    // The layers' own FLOP/s, from the trace (level framework), at the smallest batch size.
    // A run that traced its layers says how many layer spans it sent.
    var traced = typeof (details.trace || {}).layer_spans === "number" && state.trace_id;
    if (traced && layerTimesFor !== state.trace_id) readLayerTimes(state.trace_id);
    var batch = smallest ? smallest.batch_size : 1;
    // A layer's time per call: on a GPU its kernels' (the host-side span only launches them),
    // on the CPU its span's.
    // ONNX Runtime names a fused node after its output tensor: `aliases` says whose it is.
    var onGpu = details.device && details.device !== "cpu";
    var counted = {};
    layers.forEach(function (layer) { counted[layer.name] = true; });
    var aliases = t.aliases || {};
    var means = {};
    (layerTimes || []).forEach(function (row) {
      if (row.batch_size !== batch && row.batch_size !== null) return;
      var name = counted[row.name] ? row.name : aliases[row.name.replace(/_nchwc$/, "")];
      if (!name || means[name] !== undefined) return;
      if (onGpu) {
        if (row.kernel_total_ns) means[name] = row.kernel_total_ns / row.count;
      } else {
        means[name] = row.mean_ns;
      }
    });
    var layerPoints = [];
    var rows = layers.map(function (layer) {
      var row = el("tr");
      row.dataset.layer = layer.name;
      row.append(el("td", layer.name, "mono"), el("td", layer.op_type),
        el("td", si(layer.macs), "num"), el("td", layer.params.toLocaleString("en"), "num"),
        el("td", typeof layer.intensity === "number" ? layer.intensity.toFixed(1) : "—", "num"));
      var mean = means[layer.name];
      var gflops = layer.macs && mean ? 2 * layer.macs * batch / mean : null;  // FLOP/ns = GFLOP/s
      row.append(el("td", gflops === null ? "—" : gflops.toFixed(2), "num"));
      if (gflops !== null) {
        layerPoints.push({ name: layer.name, x: intensity(layer.macs, layer.activation_bytes, layer.weight_bytes, batch), y: gflops });
      }
      return row;
    });
    layersBox.hidden = false;
    var body = $("theoretical-layers").querySelector("tbody");
    body.replaceChildren.apply(body, rows);
    $("theoretical-layers").dataset.achieved = String(layerPoints.length);

    plot.hidden = !roof.measured;
    if (!roof.measured || typeof Plotly === "undefined") return;
    // Points a log axis can place only (a model that does no multiply-adds has none).
    var model = (t.achieved || []).map(function (a) {
      return { x: intensity(t.macs, activations, weights, a.batch_size), y: a.gflops_per_s, batch: a.batch_size };
    }).filter(function (p) { return p.x > 0 && p.y > 0; });
    layerPoints = layerPoints.filter(function (p) { return p.x > 0 && p.y > 0; });
    if (!model.length && !layerPoints.length) { plot.hidden = true; return; }
    var xs = model.map(function (p) { return p.x; }).concat(layerPoints.map(function (p) { return p.x; }));
    var low = Math.min.apply(null, xs.concat([roof.ridge_flop_per_byte])) / 4;
    var high = Math.max.apply(null, xs.concat([roof.ridge_flop_per_byte])) * 4;
    var roofX = [], roofY = [];
    for (var i = 0; i <= 60; i++) {
      var x = low * Math.pow(high / low, i / 60);
      roofX.push(x);
      roofY.push(Math.min(roof.peak_gflops_per_s, roof.bandwidth_gb_per_s * x));
    }
    var traces = [
      { type: "scatter", mode: "lines", name: "roofline (" + roof.device + ")", x: roofX, y: roofY,
        line: { color: "#888" }, hoverinfo: "skip" },
      { type: "scatter", mode: "markers+text", name: "model", x: model.map(function (p) { return p.x; }),
        y: model.map(function (p) { return p.y; }), text: model.map(function (p) { return "batch " + p.batch; }),
        textposition: "top center", marker: { size: 11 },
        hovertemplate: "%{text}: %{y:.2f} GFLOP/s at %{x:.1f} FLOP/byte<extra></extra>" }
    ];
    if (layerPoints.length) {
      traces.push({ type: "scatter", mode: "markers", name: "layers (batch " + batch + ")",
        x: layerPoints.map(function (p) { return p.x; }), y: layerPoints.map(function (p) { return p.y; }),
        text: layerPoints.map(function (p) { return p.name; }), marker: { size: 7, opacity: 0.7 },
        hovertemplate: "%{text}: %{y:.2f} GFLOP/s at %{x:.1f} FLOP/byte<extra></extra>" });
    }
    Plotly.react(plot, traces, {
      margin: { t: 10, r: 10, b: 45, l: 60 }, height: 320,
      xaxis: { type: "log", dtick: "D2", title: { text: "arithmetic intensity (FLOP/byte)" } },
      yaxis: { type: "log", dtick: "D2", title: { text: "achieved GFLOP/s" } },
      legend: { orientation: "h", y: -0.25 }
    }, { displaylogo: false, responsive: true });
    plot.dataset.points = String(model.length + layerPoints.length);
  }

  // MLPerf LoadGen: its verdict and why, the settings it ran with, a QPS search's curve, and
  // its summary and detail log as it wrote them.
  function renderLoadgen(details) {
    var run = details.loadgen;
    var box = $("loadgen");
    box.hidden = !run;
    if (!run) return;
    var s = run.settings || {};
    var verdict = run.valid === true ? "VALID" : run.valid === false ? "INVALID" : "no performance verdict (an accuracy run)";
    var verdictBox = $("loadgen-verdict");
    verdictBox.replaceChildren(el("strong", "LoadGen " + s.scenario + " (" + s.mode + " mode): "),
      el("span", verdict, "badge " + (run.valid === true ? "ok" : run.valid === false ? "warn" : "")));
    verdictBox.dataset.valid = String(run.valid);
    var accuracy = run.accuracy;
    if (accuracy) {
      verdictBox.append(document.createTextNode(" · top-1 " + percent(accuracy.top1) + " over " + accuracy.samples + " samples"));
    }
    var parts = [s.samples + " samples"];
    if (s.target_qps) parts.push("target " + s.target_qps + " QPS");
    if (s.latency_bound_ms) parts.push("p99 bound " + s.latency_bound_ms + " ms");
    if (s.samples_per_query) parts.push(s.samples_per_query + " samples per query");
    if (s.batch_size) parts.push("batches of up to " + s.batch_size);
    parts.push("at least " + s.min_duration_ms + " ms and " + s.min_query_count + " queries");
    parts.push("seed " + (s.seeds || {}).schedule);
    if (s.loadgen_version) parts.push("mlcommons-loadgen " + s.loadgen_version);
    $("loadgen-settings").textContent = parts.join(" · ");
    var early = $("loadgen-early");
    early.replaceChildren.apply(early, (run.early_stopping || []).map(function (line) {
      return el("li", "Early stopping: " + line.replace(/^\*\s*/, ""), "notice");
    }));
    $("loadgen-summary").textContent = run.summary_text || "";
    $("loadgen-log").textContent = run.log || "";

    var search = run.search;
    $("loadgen-search").hidden = !search;
    if (!search) return;
    $("loadgen-peak").textContent = search.peak_qps !== null
      ? "Peak: " + search.peak_qps + " QPS with the p99 under " + search.latency_bound_ms + " ms (" + search.curve.length + " runs)."
      : "No target QPS kept the p99 under " + search.latency_bound_ms + " ms (" + search.curve.length + " runs).";
    var body = $("qps-curve").querySelector("tbody");
    body.replaceChildren.apply(body, search.curve.map(function (p) {
      var row = el("tr");
      row.append(el("td", p.target_qps, "num"),
        el("td", typeof p.completed_qps === "number" ? p.completed_qps.toFixed(2) : "—", "num"),
        el("td", typeof p.p99_ms === "number" ? p.p99_ms.toFixed(3) : "—", "num"),
        el("td", p.latency_held ? "yes" : "no"),
        el("td", p.valid === true ? "VALID" : p.valid === false ? "INVALID" : "—"));
      return row;
    }));
    var plot = $("qps-plot");
    if (typeof Plotly === "undefined") return;
    Plotly.react(plot, [
      { type: "scatter", mode: "lines+markers", name: "p99 latency",
        x: search.curve.map(function (p) { return p.target_qps; }),
        y: search.curve.map(function (p) { return p.p99_ms; }),
        marker: { color: search.curve.map(function (p) { return p.latency_held ? "#2a7" : "#c33"; }), size: 9 },
        hovertemplate: "%{x} QPS: p99 %{y:.2f} ms<extra></extra>" },
      { type: "scatter", mode: "lines", name: "bound", line: { dash: "dash", color: "#888" },
        x: [Math.min.apply(null, search.curve.map(function (p) { return p.target_qps; })),
            Math.max.apply(null, search.curve.map(function (p) { return p.target_qps; }))],
        y: [search.latency_bound_ms, search.latency_bound_ms], hoverinfo: "skip" }
    ], {
      margin: { t: 10, r: 10, b: 45, l: 60 }, height: 280,
      xaxis: { type: "log", dtick: "D2", title: { text: "target QPS" } },
      yaxis: { type: "log", dtick: "D2", title: { text: "p99 latency (ms)" } },
      legend: { orientation: "h", y: -0.3 }
    }, { displaylogo: false, responsive: true });
    plot.dataset.points = String(search.curve.length);
  }

  function render() {
    renderStatus();
    renderHistory();
    renderResult();
  }

  function sameChange(a, b) {
    return a.status === b.status && a.at === b.at && a.attempt === b.attempt;
  }

  function handle(message) {
    if (message.type === "snapshot") {
      state = message.evaluation;
    } else if (message.type === "status") {
      Object.assign(state, message.evaluation);
      var change = { status: message.status, reason: message.reason, at: message.at,
        attempt: message.attempt, host: message.host };
      state.history = state.history || [];
      if (!state.history.some(function (known) { return sameChange(known, change); })) {
        state.history.push(change);
      }
      if (message.status === "succeeded" && !state.result) refresh();
    } else if (message.type === "progress") {
      state.status = message.status;
      state.progress = { done: message.done, total: message.total };
    } else if (message.type === "cancel_requested") {
      Object.assign(state, message.evaluation);
    }
    render();
    if (finished()) setLive("done", "finished");
  }

  // The REST endpoint: the result after success, and the fallback when the socket is gone.
  function refresh() {
    return fetch(script.dataset.api, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      })
      .then(function (data) { state = data; render(); });
  }

  function poll() {
    if (polling) return;
    polling = true;
    setLive("polling", "reconnecting: checking every " + POLL_MS / 1000 + " s");
    (function tick() {
      refresh().then(function () {
        if (finished()) { setLive("done", "finished"); polling = false; return; }
        setTimeout(tick, POLL_MS);
      }, function () {
        setLive("polling", "the hub does not answer; retrying");
        setTimeout(tick, POLL_MS * 2);
      });
    })();
  }

  function connect() {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var socket;
    try {
      socket = new WebSocket(scheme + location.host + script.dataset.socket);
    } catch (error) {
      poll();
      return;
    }
    socket.addEventListener("open", function () { setLive("connected", "live"); });
    socket.addEventListener("message", function (event) { handle(JSON.parse(event.data)); });
    socket.addEventListener("close", function () {
      if (finished()) { setLive("done", "finished"); return; }
      poll();
    });
  }

  render();
  if (finished()) {
    setLive("done", "finished");
  } else {
    connect();
  }
})();
