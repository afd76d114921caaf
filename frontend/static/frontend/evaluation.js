// Evaluation page: keeps the status, progress, history and results current without a reload.
// The page embeds the evaluation as GET /api/v1/evaluations/<id>/ shows it; the WebSocket
// /ws/evaluations/<id>/ sends a snapshot of the same shape and then every event. Only when the
// socket closes before the evaluation finishes does the page poll the REST endpoint instead.
// live.js, loaded before it, says which statuses are final and opens the socket.
(function () {
  "use strict";
  var script = document.getElementById("evaluation-script");
  var state = JSON.parse(document.getElementById("evaluation-data").textContent);
  var POLL_MS = 2000;
  var polling = false;

  function $(id) { return document.getElementById(id); }
  function finished() { return liveEvaluation.finished(state.status); }
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
    var waiting = {
      queued: "queued: waiting for a host that can run it…",
      dispatched: "dispatched: waiting for a host to take it…",
      running: "running: reading its inputs and loading the model…"
    };
    $("progress-text").textContent = total
      ? done + " of " + total + " predictions (" + Math.floor(share * 100) + " %)"
      : (finished() ? "" : (waiting[state.status] || "waiting for a host to start it…"));
    renderSpans();

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

  // The spans stored, as the page first showed them: of those sent where the agent said.
  function renderSpans() {
    var spans = state.spans;
    var cell = $("fact-spans");
    if (!spans || !cell || typeof spans.stored !== "number") return;
    if (spans.sent === null || spans.sent === undefined) {
      cell.textContent = spans.stored + " stored";
      return;
    }
    cell.textContent = spans.stored + " stored of " + spans.sent + " sent";
    if (spans.stored !== spans.sent) {
      var note = ((state.result || {}).details || {}).trace_export || "some have not arrived yet";
      cell.append(" ", el("span", "(" + note + ")", "muted small"));
    }
  }

  // The sharing panel as the hub renders it now: once the run has finished, what may be
  // published (and why not) is the server's to say.
  function refreshSharing() {
    var panel = $("sharing");
    if (!panel) return;
    fetch(window.location.pathname, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (!html) return;
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("sharing");
        if (!fresh) return;
        // Keyboard focus stays where it was (by id), and the panel's news is announced.
        var focused = panel.contains(document.activeElement) ? document.activeElement.id : "";
        panel.replaceChildren.apply(panel, Array.from(fresh.childNodes));
        if (focused && $(focused)) $(focused).focus();
      })
      .catch(function () { /* the panel stays as it was; a reload shows it */ });
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
    if ((details.model || {}).task === "text_recognition" && details.accuracy) {
      // jiwer's error rates over the whole split (lower is better), and the exact lines.
      var read = details.accuracy;
      metrics = [["CER", percent(read.cer)], ["WER", percent(read.wer)],
        ["Exact lines", percent(read.exact_match)],
        ["Decoding", read.decoding === "beam" ? "beam (width " + read.beam_width + ")" : String(read.decoding)],
        ["Lines", result.accuracy.count]];
    }
    if ((details.model || {}).task === "feature_extraction" && details.accuracy) {
      // Embeddings compared by cosine similarity: retrieval, and verification over every pair.
      var near = details.accuracy;
      metrics = [["Recall@1", percent(near.recall_at_1)], ["Recall@5", percent(near.recall_at_5)],
        ["EER", near.eer === null ? "— (no pair of each kind)" : percent(near.eer)],
        ["Identities", near.identities], ["Pairs", near.pairs], ["Inputs", result.accuracy.count]];
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

    // Whether the model keeps a state inside itself between calls (two calls on the same
    // input, before timing), and what the loop did about it: reset it, or (for none) nothing.
    var modelState = $("model-state");
    var kept = details.state;
    modelState.hidden = !kept;
    modelState.dataset.stateful = kept ? String(!!kept.stateful) : "";
    modelState.textContent = !kept ? "" : kept.stateful
      ? "Model state: the model keeps a state inside itself between calls (two calls on the " +
        "same input differed: " + kept.difference + "); it was " + kept.handling +
        ", outside the timed calls."
      : "Model state: none kept between calls (two calls on the same input agreed, " +
        (kept.checked || "before timing") + ").";

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
    renderTargetCi(details);

    var sizes = Object.keys(result.latency || {}).sort(function (a, b) { return a - b; });
    var rows = sizes.map(function (size) {
      var l = result.latency[size];
      var row = el("tr");
      row.dataset.batchSize = size;
      row.append(el("th", size, "num"));
      // Every figure as the statistics layer prints it (the API's `text`).
      var text = l.text || {};
      ["p50", "p50_interval", "p90", "p99", "mean", "min", "max", "std"].forEach(function (key) {
        row.append(el("td", text[key] || "—", "num"));
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
      $("roofline-peaks").hidden = true;
      $("roofline-notes").hidden = true;
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
    renderRoofline(roof, t.achieved || []);

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
    var notes = $("roofline-notes");
    notes.replaceChildren();
    notes.hidden = true;
    if (!roof.measured) return;
    // Points a log axis can place only (a model that does no multiply-adds has none). A point
    // above the roof is drawn apart, with its reason beside the plot.
    var model = (t.achieved || []).map(function (a) {
      var x = typeof a.intensity === "number" ? a.intensity : intensity(t.macs, activations, weights, a.batch_size);
      return { x: x, y: a.gflops_per_s, label: "batch " + a.batch_size,
        note: a.note || aboveRoof(roof, x, a.gflops_per_s, true) };
    }).filter(function (p) { return p.x > 0 && p.y > 0; });
    layerPoints = layerPoints.filter(function (p) { return p.x > 0 && p.y > 0; });
    layerPoints.forEach(function (p) { p.label = p.name; p.note = aboveRoof(roof, p.x, p.y, false); });
    var flagged = model.concat(layerPoints).filter(function (p) { return p.note; });
    flagged.forEach(function (p) {
      var item = el("li", p.label + " (" + p.y.toFixed(2) + " GFLOP/s at " + p.x.toFixed(1) + " FLOP/byte): " + p.note);
      item.dataset.point = p.label;
      notes.append(item);
    });
    notes.hidden = !flagged.length;
    if (typeof Plotly === "undefined") return;
    if (!model.length && !layerPoints.length) { plot.hidden = true; return; }
    var xs = model.map(function (p) { return p.x; }).concat(layerPoints.map(function (p) { return p.x; }));
    var ridge = roof.ridge_flop_per_byte ? [roof.ridge_flop_per_byte] : [];
    var low = Math.min.apply(null, xs.concat(ridge)) / 4;
    var high = Math.max.apply(null, xs.concat(ridge)) * 4;
    var roofX = [], roofY = [];
    for (var i = 0; i <= 60; i++) {
      var x = low * Math.pow(high / low, i / 60);
      roofX.push(x);
      roofY.push(roofAt(roof, x));
    }
    function points(name, list, marker, extra) {
      return Object.assign({ type: "scatter", mode: "markers", name: name,
        x: list.map(function (p) { return p.x; }), y: list.map(function (p) { return p.y; }),
        text: list.map(function (p) { return p.label; }), marker: marker,
        hovertemplate: "%{text}: %{y:.2f} GFLOP/s at %{x:.1f} FLOP/byte<extra></extra>" }, extra || {});
    }
    var under = function (p) { return !p.note; };
    var traces = [
      { type: "scatter", mode: "lines", name: "roofline (" + roof.device + ", " +
        ((roof.roof || {}).source || "measured") + " peak)", x: roofX, y: roofY,
        line: { color: "#888" }, hoverinfo: "skip" }
    ];
    if (model.filter(under).length) {
      traces.push(points("model", model.filter(under), { size: 11 },
        { mode: "markers+text", textposition: "top center" }));
    }
    if (layerPoints.filter(under).length) {
      traces.push(points("layers (batch " + batch + ")", layerPoints.filter(under), { size: 7, opacity: 0.7 }));
    }
    if (flagged.length) {
      traces.push(points("above the roof (reasons below)", flagged,
        { size: 9, symbol: "x", color: "#b00020" },
        { hovertemplate: "%{text}: %{y:.2f} GFLOP/s at %{x:.1f} FLOP/byte, above the roof<extra></extra>" }));
    }
    // The stated peaks the roof is not, dotted, so that which one it is shows.
    var others = [];
    if (roof.peaks) {
      [["measured", "measured peak"], ["theoretical", "theoretical peak"]].forEach(function (key) {
        var value = (roof.peaks[key[0]] || {}).gflops;
        if (value && value !== roof.peak_gflops_per_s) others.push({ y: value, text: key[1] + " " + value + " GFLOP/s" });
      });
    }
    Plotly.react(plot, traces, {
      margin: { t: 10, r: 10, b: 45, l: 60 }, height: 320,
      xaxis: { type: "log", dtick: "D2", title: { text: "arithmetic intensity (FLOP/byte)" } },
      yaxis: { type: "log", dtick: "D2", title: { text: "achieved GFLOP/s" } },
      legend: { orientation: "h", y: -0.25 },
      shapes: others.map(function (o) {
        return { type: "line", xref: "paper", x0: 0, x1: 1, y0: o.y, y1: o.y, line: { color: "#aaa", width: 1, dash: "dot" } };
      }),
      annotations: others.map(function (o) {  // a log axis places annotations by log10
        return { xref: "paper", x: 0, xanchor: "left", y: Math.log10(o.y), yanchor: "bottom", text: o.text,
          showarrow: false, font: { size: 10, color: "#777" } };
      })
    }, { displaylogo: false, responsive: true });
    plot.dataset.points = String(model.length + layerPoints.length);
    plot.dataset.above = String(flagged.length);
  }

  // The roof at an intensity: min(peak, bandwidth × intensity); the peak where either is unknown.
  function roofAt(roof, x) {
    var peak = roof.peak_gflops_per_s;
    return roof.bandwidth_gb_per_s && x ? Math.min(peak, roof.bandwidth_gb_per_s * x) : peak;
  }

  // Why a point lies above the roof (null where it does not), as predictors/analysis/roofline.py says
  // it for a result's own points.
  function aboveRoof(roof, x, y, whole) {
    if (y > roof.peak_gflops_per_s * (1 + 1e-9)) {
      if (!roof.peaks) {
        return "above the peak numpy's matrix product reached when the run was measured: the " +
          "framework's own kernels pass it (later runs measure the framework's own product)";
      }
      return whole
        ? "above every stated peak: an error of the counts (multiply-adds by the direct formulas, " +
          "with no fusion) or a clock above the one read"
        : "above the compute roof: the layer's count (multiply-adds by the direct formulas, no " +
          "fusion) may overstate the work its kernel did (a Winograd or FFT convolution does less), " +
          "or its span leave part of its time out";
    }
    if (y > roofAt(roof, x) * (1 + 1e-9)) {
      return "above the memory slope at its intensity: its bytes stay in the caches, faster " +
        "than the memory the bandwidth was measured on";
    }
    return null;
  }

  // The roofline's peaks, each with how it was obtained, the roof drawn and why, and each
  // batch size's share of it: at most 100 %, the roof holding every point of the run
  // (`predictors.analysis.roofline.place`).
  function renderRoofline(roof, achieved) {
    var text = $("roofline-summary"), peaks = $("roofline-peaks");
    peaks.replaceChildren();
    peaks.hidden = !roof.measured;
    if (!roof.measured) {
      text.textContent = "No roofline: " + (roof.reason || "the device was not measured") + ".";
      return;
    }
    var drawn = roof.roof || { gflops: roof.peak_gflops_per_s, source: "measured",
      why: "the peak numpy's matrix product reached in the run's process" };
    function peak(key, term, value, unit, found) {
      found = found || {};
      var dd = value
        ? value + " " + unit + ": " + found.method
        : "unknown: " + (found.reason || "not measured");
      list(term, dd, key);
    }
    function list(term, value, key) {
      var dd = el("dd", value);
      dd.dataset.peak = key;
      peaks.append(el("dt", term), dd);
    }
    list("Roof drawn", drawn.gflops + " GFLOP/s, " + drawn.why, "roof");
    if (roof.peaks) {
      peak("measured", "Measured peak", roof.peaks.measured.gflops, "GFLOP/s", roof.peaks.measured);
      peak("theoretical", "Theoretical peak", roof.peaks.theoretical.gflops, "GFLOP/s", roof.peaks.theoretical);
      peak("bandwidth", "Bandwidth", (roof.bandwidth || {}).gb_per_s, "GB/s", roof.bandwidth);
    } else {  // a result from before both peaks were kept
      list("Measured peak", roof.peak_gflops_per_s + " GFLOP/s: " + roof.method, "measured");
      list("Bandwidth", roof.bandwidth_gb_per_s + " GB/s", "bandwidth");
    }
    var shares = achieved.map(function (a) {
      var share = typeof a.of_peak === "number" ? a.of_peak : a.gflops_per_s / roof.peak_gflops_per_s;
      return "batch size " + a.batch_size + " " + (100 * share).toFixed(1) + " %";
    });
    text.textContent = "Roofline of " + roof.device + (roof.framework ? " for " + roof.framework : "") +
      ": peak " + roof.peak_gflops_per_s + " GFLOP/s (" + drawn.source + "), bandwidth " +
      (roof.bandwidth_gb_per_s || "unknown") + " GB/s" +
      (roof.ridge_flop_per_byte ? ", ridge at " + roof.ridge_flop_per_byte + " FLOP/byte" : "") + "." +
      (shares.length ? " Share of that peak: " + shares.join(", ") + "." : "");
  }

  // MLPerf LoadGen: the verdict, the target, the settings, the summary and the log are all of
  // one run (`reported`; of a QPS search, the run at the peak, marked in the curve). Why an
  // INVALID run is and LoadGen's own warnings and errors go in the warning box; what is only
  // information (early stopping's "Run successful.") in the notes.
  function qps(value) {
    return typeof value === "number" ? String(Number(value.toFixed(3))) : "—";
  }

  // Timing toward a target interval (`target_ci`): a line per batch size saying what stopped
  // it, in the loop's own words.
  function renderTargetCi(details) {
    var list = $("target-ci");
    var items = (details.batch_sizes || []).filter(function (b) { return b.target_ci; }).map(function (b) {
      var item = el("li", "Batch size " + b.batch_size + ": " + (b.target_ci.text || b.target_ci.stopped));
      item.dataset.batchSize = String(b.batch_size);
      item.dataset.stopped = String(b.target_ci.stopped);
      return item;
    });
    list.hidden = !items.length;
    list.replaceChildren.apply(list, items);
  }

  function renderLoadgen(details) {
    var run = details.loadgen;
    var box = $("loadgen");
    box.hidden = !run;
    if (!run) return;
    var s = run.settings || {};
    var reported = run.reported || {};
    var verdict = run.valid === true ? "VALID" : run.valid === false ? "INVALID" : "no performance verdict (an accuracy run)";
    var verdictBox = $("loadgen-verdict");
    verdictBox.replaceChildren(el("strong", "LoadGen " + s.scenario + " (" + s.mode + " mode): "),
      el("span", verdict, "badge " + (run.valid === true ? "ok" : run.valid === false ? "warn" : "")));
    if (typeof s.target_qps === "number") {
      verdictBox.append(document.createTextNode(" · target " + qps(s.target_qps) + " QPS"));
    }
    verdictBox.dataset.valid = String(run.valid);
    verdictBox.dataset.targetQps = typeof s.target_qps === "number" ? qps(s.target_qps) : "";
    verdictBox.dataset.run = reported.run !== undefined ? String(reported.run) : "";
    var accuracy = run.accuracy;
    if (accuracy) {
      verdictBox.append(document.createTextNode(" · top-1 " + percent(accuracy.top1) + " over " + accuracy.samples + " samples"));
    }
    var search = run.search;
    var shown = $("loadgen-reported");
    shown.hidden = !(search && reported.statement);
    shown.textContent = search && reported.statement
      ? "Showing " + reported.statement + ". The verdict, target, settings, summary and log here are all of this run."
      : "";
    var parts = [s.samples + " samples"];
    if (typeof s.target_qps === "number") parts.push("target " + qps(s.target_qps) + " QPS" + (search ? " (the run shown)" : ""));
    if (search && typeof s.start_qps === "number") parts.push("search from " + qps(s.start_qps) + " QPS");
    if (s.latency_bound_ms) parts.push("p99 bound " + s.latency_bound_ms + " ms");
    if (s.samples_per_query) parts.push(s.samples_per_query + " samples per query");
    if (s.batch_size) parts.push("batches of up to " + s.batch_size);
    parts.push("at least " + s.min_duration_ms + " ms and " + s.min_query_count + " queries");
    parts.push("seed " + (s.seeds || {}).schedule);
    if (s.loadgen_version) parts.push("mlcommons-loadgen " + s.loadgen_version);
    $("loadgen-settings").textContent = parts.join(" · ");

    var warnings = (run.invalid_reasons || []).map(function (reason) { return "INVALID: " + reason; })
      .concat((run.problems || []).map(function (problem) {
        return "LoadGen " + problem.level + ": " + problem.message + (problem.count > 1 ? " (×" + problem.count + ")" : "");
      }));
    var warningList = $("loadgen-warnings");
    warningList.hidden = !warnings.length;
    warningList.replaceChildren.apply(warningList, warnings.map(function (line) { return el("li", line, "notice"); }));
    // A result kept before its notes were read apart: its early-stopping lines are notes.
    var notes = run.notes || (run.early_stopping || []).map(function (line) {
      return "Early stopping: " + line.replace(/^\*\s*/, "");
    });
    var noteList = $("loadgen-notes");
    noteList.hidden = !notes.length;
    noteList.replaceChildren.apply(noteList, notes.map(function (line) { return el("li", line); }));
    $("loadgen-summary").textContent = run.summary_text || "";
    $("loadgen-log").textContent = run.log || "";

    $("loadgen-search").hidden = !search;
    if (!search) return;
    var peak = search.peak_qps !== null && search.peak_qps !== undefined
      ? "Peak: " + qps(search.peak_qps) + " QPS, the highest target LoadGen judged VALID (p99 under " + search.latency_bound_ms + " ms; " + search.curve.length + " runs)."
      : "No run was VALID: no target QPS kept the p99 under " + search.latency_bound_ms + " ms with enough queries (" + search.curve.length + " runs).";
    var held = search.highest_held_qps;
    if (typeof held === "number" && (search.peak_qps === null || held > search.peak_qps)) {
      peak += " The p99 also held at " + qps(held) + " QPS, in a run LoadGen judged INVALID.";
    }
    $("loadgen-peak").textContent = peak;
    var body = $("qps-curve").querySelector("tbody");
    body.replaceChildren.apply(body, search.curve.map(function (p) {
      var row = el("tr");
      var isShown = p.reported === true || (p.run !== undefined && p.run === search.reported_run);
      if (p.run !== undefined) row.dataset.run = String(p.run);
      if (isShown) {
        row.className = "reported";
        row.setAttribute("aria-current", "true");
      }
      var validity = el("td", p.valid === true ? "VALID" : p.valid === false ? "INVALID" : "—");
      if (p.invalid_reasons && p.invalid_reasons.length) validity.title = p.invalid_reasons.join("; ");
      row.append(el("td", p.run !== undefined ? p.run : "—", "num"),
        el("td", qps(p.target_qps), "num"),
        el("td", typeof p.completed_qps === "number" ? p.completed_qps.toFixed(2) : "—", "num"),
        el("td", typeof p.p99_ms === "number" ? p.p99_ms.toFixed(3) : "—", "num"),
        el("td", p.latency_held ? "yes" : "no"),
        validity,
        el("td", isShown ? "shown above" : "", "small"));
      return row;
    }));
    var plot = $("qps-plot");
    if (typeof Plotly === "undefined") return;
    var shownPoints = search.curve.filter(function (p) { return p.reported === true; });
    var traces = [
      { type: "scatter", mode: "lines+markers", name: "p99 latency",
        x: search.curve.map(function (p) { return p.target_qps; }),
        y: search.curve.map(function (p) { return p.p99_ms; }),
        marker: { color: search.curve.map(function (p) { return p.valid === true ? "#2a7" : "#c33"; }), size: 9 },
        hovertemplate: "%{x} QPS: p99 %{y:.2f} ms<extra></extra>" },
      { type: "scatter", mode: "lines", name: "bound", line: { dash: "dash", color: "#888" },
        x: [Math.min.apply(null, search.curve.map(function (p) { return p.target_qps; })),
            Math.max.apply(null, search.curve.map(function (p) { return p.target_qps; }))],
        y: [search.latency_bound_ms, search.latency_bound_ms], hoverinfo: "skip" }
    ];
    if (shownPoints.length) {
      traces.push({ type: "scatter", mode: "markers", name: "run shown",
        x: shownPoints.map(function (p) { return p.target_qps; }), y: shownPoints.map(function (p) { return p.p99_ms; }),
        marker: { size: 18, color: "rgba(0,0,0,0)", line: { width: 2, color: "#1a4fd6" } },
        hovertemplate: "run shown: %{x} QPS<extra></extra>" });
    }
    Plotly.react(plot, traces, {
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
    var wasFinished = finished();
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
    if (finished() && !wasFinished) refreshSharing();
  }

  // The REST endpoint: the result after success, and the fallback when the socket is gone.
  function refresh() {
    var wasFinished = finished();
    return fetch(script.dataset.api, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      })
      .then(function (data) {
        state = data;
        render();
        if (finished() && !wasFinished) refreshSharing();
      });
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
    var socket = liveEvaluation.socket(script.dataset.socket);
    if (!socket) {
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
