/* The evaluation's trace on a <canvas>: one track per level, spans as bars placed by their start
   and end, coloured by op type, and below them one track per hardware counter (GPU power, SM
   use, …), a line scaled to its largest value in the window. Every change of the visible window
   (wheel, drag, keys, buttons) asks the hub for that window only —
   `/timeline?start=&end=&max_spans=&max_points=` answers the longest spans first and the
   counters downsampled to about a point per pixel — so a large trace is never shipped whole.
   Beside it, the per-layer aggregates of `/layers` in a sortable table. While the evaluation
   runs, both are read again every few seconds to pick up new spans (live.js, loaded before
   this, says which statuses are final and opens the evaluation's socket). */
(function () {
  "use strict";
  var script = document.getElementById("timeline-script");
  var canvas = document.getElementById("timeline");
  if (!script || !canvas) return;
  var TIMELINE = script.dataset.timeline;
  var LAYERS = script.dataset.layers;
  var SEARCH = script.dataset.search;
  var SPAN = script.dataset.span;
  var SELECTION = script.dataset.selection;
  var EVALUATION = script.dataset.evaluation;
  var finished = script.dataset.finished === "true";

  // One track per level (the page hands them over, outermost first); GPU activities (kernels,
  // copies, memsets) of level system_library get a track of their own, "gpu", below the CUDA
  // runtime calls that launched them.
  var LEVELS = [];
  script.dataset.levels.split(" ").forEach(function (level) {
    LEVELS.push(level);
    if (level === "system_library") LEVELS.push("gpu");
  });
  var GPU_OPS = { kernel: true, memcpy: true, memset: true };
  // Dark enough for white names on every bar.
  var PALETTE = ["#1f6feb", "#d1495b", "#2a9d8f", "#8e5cc4", "#e07a1f", "#3d7d2e",
    "#b5477e", "#4a5a8c", "#a0522d", "#0f7c99", "#7a6a00", "#c2410c"];
  var STATUS = { 0: "unset", 1: "ok", 2: "error" };
  var LABEL_W = 118, AXIS_H = 26, LANE_H = 20, TRACK_GAP = 8, MAX_LANES = 6, COUNTER_H = 40;
  var MIN_WINDOW = 1000; // ns
  var ctx = canvas.getContext("2d");
  var statusText = document.getElementById("timeline-status");
  var search = document.getElementById("span-search");
  var searchCount = document.getElementById("search-count");
  var searchPrev = document.getElementById("search-prev");
  var searchNext = document.getElementById("search-next");

  var trace = { start: null, end: null };
  var view = { start: 0, end: 0 };
  var spans = [];      // the spans of the latest answer
  var total = 0;
  var rects = [];      // what was drawn, for hit-testing: {x, y, w, h, span}
  var levelsSeen = {}; // levels of the layers table and of every answer: tracks stay put on zoom
  var counters = {};   // the counters of the latest answer: {name: {unit, device, points}}
  var countersSeen = {}; // counter names of every answer: their tracks stay put on zoom too
  var overviewSpans = []; // the longest spans of the whole trace, for the overview strip
  var selected = null;
  var pendingSelect = null; // a span to select once the window that holds it has arrived
  var requests = 0;
  var fetchTimer = null;
  var inFlight = null;
  // A read of the window still in flight is not aborted by arriving spans (under load every
  // read would be aborted by the next arrival, and the window never redrawn): the arrivals
  // during a read ask for one more read once it has answered (`reload`).
  var readAgain = false;

  function hash(text) {
    var h = 2166136261;
    for (var i = 0; i < text.length; i++) {
      h ^= text.charCodeAt(i);
      h = Math.imul(h, 16777619);
    }
    h ^= h >>> 16;
    h = Math.imul(h, 2246822507);
    h ^= h >>> 13;
    return h >>> 0;
  }
  function colour(span) {
    // Op types (or names, for spans of none) get a stable colour: a palette of dark, distinct
    // colours first, then any hue, so that two op types rarely share one.
    var h = hash(span.op_type || span.name || "");
    if (h % 3 !== 2) return PALETTE[(h >>> 2) % PALETTE.length];
    return "hsl(" + ((h >>> 4) % 360) + ", 55%, 40%)";
  }
  function levelOf(span) {
    if (span.level === "system_library" && GPU_OPS[span.op_type]) return "gpu";
    return LEVELS.indexOf(span.level) >= 0 ? span.level : "other";
  }
  function isCounter(row) { return row.level === "hardware" && row.op_type === "counter"; }

  function duration(ns) {
    var abs = Math.abs(ns);
    if (abs >= 1e9) return (ns / 1e9).toFixed(3) + " s";
    if (abs >= 1e6) return (ns / 1e6).toFixed(3) + " ms";
    if (abs >= 1e3) return (ns / 1e3).toFixed(1) + " µs";
    return Math.round(ns) + " ns";
  }
  function ms(ns) { return (ns / 1e6).toFixed(3); }
  function amount(value) {
    var abs = Math.abs(value);
    if (abs >= 100 || abs === Math.round(abs)) return String(Math.round(value));
    return value.toFixed(abs >= 10 ? 1 : 2);
  }

  /* ---- fetching ---- */

  function setWindow(start, end) {
    if (trace.start === null) return;
    var span = trace.end - trace.start;
    var width = Math.max(end - start, MIN_WINDOW);
    if (width > span) {
      start = trace.start;
      end = trace.end;
    } else {
      start = Math.max(trace.start, Math.min(start, trace.end - width));
      end = start + width;
    }
    view.start = start;
    view.end = end;
    canvas.dataset.start = String(Math.floor(view.start));
    canvas.dataset.end = String(Math.ceil(view.end));
    rememberWindow();
    draw();
    clearTimeout(fetchTimer);
    fetchTimer = setTimeout(fetchWindow, 150);
  }

  // The visible window lives in the address (#window=<start ns>-<end ns>), so that a zoomed
  // view can be bookmarked and shared; the whole trace has no hash.
  function rememberWindow() {
    if (!window.history || !history.replaceState) return;
    var hash = isWhole() ? "" : "#window=" + Math.floor(view.start) + "-" + Math.ceil(view.end);
    if (location.hash !== hash) history.replaceState(null, "", location.pathname + location.search + hash);
  }
  function windowInAddress() {
    var match = /^#window=(\d+)-(\d+)$/.exec(location.hash);
    if (!match) return null;
    var start = Number(match[1]), end = Number(match[2]);
    return end > start ? { start: start, end: end } : null;
  }

  function isWhole() {
    return trace.start !== null && view.start <= trace.start && view.end >= trace.end;
  }

  function maxSpans() { return Math.max(500, Math.min(10000, Math.round(canvas.clientWidth * 4))); }
  // About one point per pixel of the plot: each is the largest sample of its slice of the window.
  function maxPoints() { return Math.max(100, Math.min(4000, Math.round(canvas.clientWidth - LABEL_W))); }

  function fetchWindow() {
    var url = TIMELINE + "?max_spans=" + maxSpans() + "&max_points=" + maxPoints();
    // The whole trace is asked for without a window, so that spans which arrived after it
    // (and beyond its last end) come too; a zoomed view asks for its window only.
    if (trace.start !== null && !isWhole()) {
      url += "&start=" + Math.floor(view.start) + "&end=" + Math.ceil(view.end);
    }
    if (inFlight) inFlight.abort();
    var controller = window.AbortController ? new AbortController() : null;
    inFlight = controller;
    requests += 1;
    canvas.dataset.requests = String(requests);
    return fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin",
      signal: controller ? controller.signal : undefined })
      .then(function (response) {
        if (!response.ok) throw new Error("the hub answered " + response.status);
        return response.json();
      })
      .then(function (body) {
        if (inFlight === controller) inFlight = null;
        if (readAgain && !inFlight) { readAgain = false; reload(); }
        var first = trace.start === null;
        var whole = isWhole();
        if (body.trace_start !== null && body.trace_end !== null) {
          trace.start = body.trace_start;
          trace.end = body.trace_end;
          if (first || whole) {
            view.start = trace.start;
            view.end = trace.end;
            canvas.dataset.start = String(Math.floor(view.start));
            canvas.dataset.end = String(Math.ceil(view.end));
          }
        }
        spans = body.spans || [];
        total = body.total || 0;
        // The answer for the whole trace also feeds the overview strip.
        if (first || whole) overviewSpans = spans;
        spans.forEach(function (span) { levelsSeen[levelOf(span)] = true; });
        counters = body.counters || {};
        Object.keys(counters).forEach(function (name) { countersSeen[name] = true; });
        document.getElementById("timeline-empty").hidden = !(finished && trace.start === null);
        draw();
        if (pendingSelect) {
          var wanted = spans.filter(function (span) { return span.span_id === pendingSelect; })[0];
          if (wanted) {
            pendingSelect = null;
            select(wanted);
          }
        }
        var asked = first && trace.start !== null ? windowInAddress() : null;
        if (asked) setWindow(asked.start, asked.end);
      })
      .catch(function (error) {
        if (error && error.name === "AbortError") return;
        if (inFlight === controller) inFlight = null;
        statusText.textContent = "Could not read the spans: " + error.message;
      });
  }

  /* ---- drawing ---- */

  function tracks() {
    var present = LEVELS.concat(["other"]).filter(function (level) { return levelsSeen[level]; });
    var byLevel = {};
    present.forEach(function (level) { byLevel[level] = []; });
    spans.forEach(function (span) {
      if (span.end_ns < view.start || span.start_ns > view.end) return;
      var level = levelOf(span);
      if (!byLevel[level]) return;
      byLevel[level].push(span);
    });
    var y = AXIS_H;
    return present.map(function (level) {
      // Flame style: a span nested in another of its level (an op in an op) goes a lane below
      // its parent; spans side by side share a lane; outer spans come first.
      var list = byLevel[level].slice().sort(function (a, b) {
        return a.start_ns - b.start_ns || (b.end_ns - b.start_ns) - (a.end_ns - a.start_ns);
      });
      var laneOf = {};
      var laneEnds = [];
      var placed = list.map(function (span) {
        var parentLane = span.parent_span_id ? laneOf[span.parent_span_id] : undefined;
        var lane = parentLane === undefined ? 0 : parentLane + 1;
        while (lane < laneEnds.length && laneEnds[lane] > span.start_ns) lane++;
        if (lane >= MAX_LANES) lane = MAX_LANES - 1;
        laneEnds[lane] = Math.max(laneEnds[lane] || 0, span.end_ns);
        laneOf[span.span_id] = lane;
        return { span: span, lane: lane };
      });
      var lanes = Math.max(1, laneEnds.length);
      var track = { level: level, y: y, lanes: lanes, placed: placed };
      y += lanes * LANE_H + TRACK_GAP;
      return track;
    });
  }

  function counterTracks(y) {
    return Object.keys(countersSeen).sort().map(function (name) {
      var track = { name: name, y: y, counter: counters[name] || null };
      y += COUNTER_H + TRACK_GAP;
      return track;
    });
  }

  // An axis label: the offset from the trace's start, in the unit of its size, with as many
  // decimals as the step between ticks needs (zoomed into 6.604 s, ticks 100 ns apart read
  // 6.6043121 s, 6.6043122 s, …).
  function tickLabel(offset, step) {
    if (offset === 0) return "0";
    var units = [[1e9, "s"], [1e6, "ms"], [1e3, "µs"], [1, "ns"]];
    for (var i = 0; i < units.length; i++) {
      if (Math.abs(offset) >= units[i][0] || i === units.length - 1) {
        var decimals = Math.max(0, Math.min(9, Math.ceil(Math.log10(units[i][0] / step) - 1e-9)));
        return (offset / units[i][0]).toFixed(decimals) + " " + units[i][1];
      }
    }
    return String(offset);
  }

  function niceStep(range, pixels) {
    var raw = range / Math.max(1, pixels / 90);
    var power = Math.pow(10, Math.floor(Math.log10(raw)));
    var steps = [1, 2, 5, 10];
    for (var i = 0; i < steps.length; i++) if (steps[i] * power >= raw) return steps[i] * power;
    return 10 * power;
  }

  // Sizes a canvas to width × height CSS pixels, drawn at the screen's pixel density, and
  // clears it.
  function fit(target, context, width, height) {
    var ratio = window.devicePixelRatio || 1;
    target.style.width = width + "px";
    target.style.height = height + "px";
    target.width = Math.round(width * ratio);
    target.height = Math.round(height * ratio);
    context.setTransform(ratio, 0, 0, ratio, 0, 0);
    context.clearRect(0, 0, width, height);
  }

  function draw() {
    var width = canvas.parentElement.clientWidth;
    var layout = tracks();
    var last = layout[layout.length - 1];
    var gauges = counterTracks(last ? last.y + last.lanes * LANE_H + TRACK_GAP : AXIS_H);
    var lastGauge = gauges[gauges.length - 1];
    var bottom = lastGauge ? lastGauge.y + COUNTER_H : last ? last.y + last.lanes * LANE_H : 0;
    var height = Math.max(80, bottom ? bottom + TRACK_GAP / 2 : 80);
    fit(canvas, ctx, width, height);
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    rects = [];
    var plotW = width - LABEL_W;
    if (trace.start === null || plotW <= 0) {
      canvas.dataset.drawn = "0";
      canvas.dataset.counters = "";
      statusText.textContent = finished ? "No spans." : "Waiting for spans…";
      return;
    }
    var range = view.end - view.start || 1;
    function x(ns) { return LABEL_W + ((ns - view.start) / range) * plotW; }

    // Track backgrounds and names.
    layout.forEach(function (track, index) {
      ctx.fillStyle = index % 2 ? "#f8fafc" : "#ffffff";
      ctx.fillRect(0, track.y - TRACK_GAP / 2, width, track.lanes * LANE_H + TRACK_GAP);
      ctx.fillStyle = "#1b2430";
      ctx.font = "600 12px system-ui, sans-serif";
      ctx.fillText(track.level, 8, track.y + LANE_H / 2);
    });
    gauges.forEach(function (track, index) {
      ctx.fillStyle = (layout.length + index) % 2 ? "#f8fafc" : "#ffffff";
      ctx.fillRect(0, track.y - TRACK_GAP / 2, width, COUNTER_H + TRACK_GAP);
    });
    ctx.font = "11px system-ui, sans-serif";

    // Time axis: offsets from the start of the trace.
    ctx.fillStyle = "#f1f4f8";
    ctx.fillRect(0, 0, width, AXIS_H - 4);
    var step = niceStep(range, plotW);
    var firstTick = Math.ceil((view.start - trace.start) / step);
    ctx.strokeStyle = "#dfe5ec";
    ctx.fillStyle = "#5b6778";
    for (var k = firstTick; trace.start + k * step <= view.end; k++) {
      var offset = k * step;
      var tx = Math.round(x(trace.start + offset)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(tx, AXIS_H - 8);
      ctx.lineTo(tx, height);
      ctx.stroke();
      var tick = tickLabel(offset, step);
      ctx.fillText(tick, tx + 3, (AXIS_H - 4) / 2);
    }
    ctx.fillStyle = "#1b2430";
    ctx.fillText("time", 8, (AXIS_H - 4) / 2);

    // Spans.
    var query = search.value.trim().toLowerCase();
    var matches = 0;
    ctx.save();
    ctx.beginPath();
    ctx.rect(LABEL_W, 0, plotW, height);
    ctx.clip();
    layout.forEach(function (track) {
      track.placed.forEach(function (item) {
        var span = item.span;
        var x0 = Math.max(LABEL_W - 1, x(span.start_ns));
        var x1 = Math.min(width + 1, x(span.end_ns));
        var w = Math.max(1, x1 - x0);
        var y = track.y + item.lane * LANE_H + 1;
        var h = LANE_H - 3;
        var hit = query && matchesQuery(span, query);
        if (hit) matches++;
        ctx.globalAlpha = query && !hit ? 0.25 : 1;
        ctx.fillStyle = colour(span);
        ctx.fillRect(x0, y, w, h);
        if (hit || span === selected) {
          ctx.globalAlpha = 1;
          ctx.lineWidth = 2;
          ctx.strokeStyle = span === selected ? "#1b2430" : "#f5a623";
          ctx.strokeRect(x0 + 1, y + 1, Math.max(1, w - 2), h - 2);
        }
        if (w > 28) {
          ctx.fillStyle = "#ffffff";
          var label = span.name;
          var room = w - 8;
          if (ctx.measureText(label).width > room) {
            while (label.length > 1 && ctx.measureText(label + "…").width > room) label = label.slice(0, -1);
            label += "…";
          }
          if (ctx.measureText(label).width <= room) ctx.fillText(label, x0 + 4, y + h / 2 + 0.5);
        }
        ctx.globalAlpha = 1;
        rects.push({ x: x0, y: y, w: w, h: h, span: span });
      });
    });
    drawCounters(gauges, x, plotW);
    if (area) {
      var a0 = x(Math.min(area.from, area.to)), a1 = x(Math.max(area.from, area.to));
      ctx.fillStyle = "rgba(245, 166, 35, 0.18)";
      ctx.fillRect(a0, AXIS_H - 4, Math.max(1, a1 - a0), height);
      ctx.strokeStyle = "#c97d00";
      ctx.lineWidth = 1;
      ctx.strokeRect(a0 + 0.5, AXIS_H - 4.5, Math.max(1, a1 - a0 - 1), height);
    }
    ctx.restore();
    gauges.forEach(function (track) { labelCounter(track); });

    canvas.dataset.drawn = String(rects.length);
    canvas.dataset.counters = gauges.map(function (track) { return track.name; }).join(" ");
    canvas.dataset.total = String(total);
    canvas.dataset.tracks = layout.map(function (track) { return track.level; }).join(" ");
    statusText.textContent = rects.length + " spans drawn of " + total + " in this window ("
      + duration(range) + " of " + duration(trace.end - trace.start) + ")"
      + (finished ? "" : " · live");
    canvas.dataset.matches = String(matches);
    showFound();
    drawOverview();
  }

  // A counter's points as a line over a filled area, scaled to its largest value in the window.
  function drawCounters(gauges, x, plotW) {
    gauges.forEach(function (track) {
      var points = track.counter ? track.counter.points : [];
      track.max = null;
      if (!points.length) return;
      var max = 0;
      points.forEach(function (point) { if (point[1] > max) max = point[1]; });
      track.max = max;
      var scale = max > 0 ? (COUNTER_H - 4) / max : 0;
      var base = track.y + COUNTER_H;
      function y(value) { return base - Math.max(0, value) * scale; }
      var colour = PALETTE[hash(track.name) % PALETTE.length];
      ctx.beginPath();
      ctx.moveTo(x(points[0][0]), base);
      points.forEach(function (point) { ctx.lineTo(x(point[0]), y(point[1])); });
      // A sample holds until the next one; the last holds to the end of the window.
      var lastX = x(Math.max(points[points.length - 1][0], Math.min(view.end, trace.end)));
      ctx.lineTo(lastX, y(points[points.length - 1][1]));
      ctx.lineTo(lastX, base);
      ctx.closePath();
      ctx.globalAlpha = 0.22;
      ctx.fillStyle = colour;
      ctx.fill();
      ctx.globalAlpha = 1;
      ctx.beginPath();
      points.forEach(function (point, index) {
        if (index) ctx.lineTo(x(point[0]), y(point[1]));
        else ctx.moveTo(x(point[0]), y(point[1]));
      });
      if (points.length === 1) ctx.lineTo(lastX, y(points[0][1]));
      ctx.lineWidth = 1.5;
      ctx.strokeStyle = colour;
      ctx.stroke();
    });
  }

  function labelCounter(track) {
    var counter = track.counter;
    var unit = counter && counter.unit ? counter.unit : "";
    var label = track.name;
    ctx.font = "600 11px system-ui, sans-serif";
    ctx.fillStyle = "#1b2430";
    while (label.length > 1 && ctx.measureText(label).width > LABEL_W - 12) label = label.slice(0, -1);
    ctx.fillText(label === track.name ? label : label + "…", 8, track.y + 9);
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#5b6778";
    var text = track.max === null ? "no samples here" : "max " + amount(track.max) + (unit ? " " + unit : "");
    ctx.fillText(text, 8, track.y + 24);
  }

  /* ---- finding spans in the whole trace ---- */

  function matchesQuery(span, query) {
    return [span.name, span.op_type, span.layer_name].some(function (text) {
      return !!text && text.toLowerCase().indexOf(query) >= 0;
    });
  }

  // The hub searches every span (`/search`): the matches in time order, the first 1000 kept
  // here; ↑ and ↓ (or Enter, Shift+Enter) move the window to the previous or next of them.
  var found = { query: "", total: 0, spans: [], index: -1 };
  var searchTimer = null;

  function runSearch() {
    clearTimeout(searchTimer);
    var query = search.value.trim();
    if (!query) {
      found = { query: "", total: 0, spans: [], index: -1 };
      draw();
      return;
    }
    searchTimer = setTimeout(function () {
      fetch(SEARCH + "?limit=1000&q=" + encodeURIComponent(query),
        { headers: { Accept: "application/json" }, credentials: "same-origin" })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (body) {
          if (!body || search.value.trim() !== query) return;
          found = { query: query, total: body.total, spans: body.spans || [], index: -1 };
          canvas.dataset.found = String(found.total);
          draw();
        })
        .catch(function () {});
    }, 250);
    draw();
  }

  function showFound() {
    var query = search.value.trim();
    var have = found.query && found.query === query;
    searchPrev.disabled = searchNext.disabled = !(have && found.spans.length);
    if (!query) { searchCount.textContent = ""; return; }
    if (!have) { searchCount.textContent = "searching…"; return; }
    if (!found.total) { searchCount.textContent = "none in the trace"; return; }
    var shown = found.spans.length < found.total ? " (the first " + found.spans.length + ")" : "";
    searchCount.textContent = (found.index >= 0 ? (found.index + 1) + " of " : "")
      + found.total + " in the trace" + shown;
  }

  function step(direction) {
    if (!found.spans.length) return;
    var count = found.spans.length;
    found.index = found.index < 0 ? (direction > 0 ? 0 : count - 1)
      : (found.index + direction + count) % count;
    canvas.dataset.foundIndex = String(found.index);
    goTo(found.spans[found.index]);
  }

  // Show a span found elsewhere (a match, a parent, a child): a window about seven times its
  // length around it, and the span selected once that window has arrived.
  function goTo(span) {
    var length = Math.max(span.end_ns - span.start_ns, MIN_WINDOW);
    pendingSelect = span.span_id;
    var start = span.start_ns - 3 * length, end = span.end_ns + 3 * length;
    if (view.start <= span.start_ns && view.end >= span.end_ns && view.end - view.start <= 50 * length) {
      var already = spans.filter(function (s) { return s.span_id === span.span_id; })[0];
      if (already) { pendingSelect = null; select(already); return; }
      start = view.start; end = view.end;
    }
    setWindow(start, end);
  }

  search.addEventListener("keydown", function (event) {
    if (event.key === "Enter") {
      event.preventDefault();
      step(event.shiftKey ? -1 : 1);
    }
  });
  searchPrev.addEventListener("click", function () { step(-1); });
  searchNext.addEventListener("click", function () { step(1); });

  /* ---- the overview strip: the whole run, and where the window is in it ---- */

  var overview = document.getElementById("overview");
  var octx = overview.getContext("2d");
  var OVERVIEW_H = 30;

  function drawOverview() {
    var width = overview.parentElement.clientWidth;
    fit(overview, octx, width, OVERVIEW_H);
    octx.fillStyle = "#f1f4f8";
    octx.fillRect(0, 0, width, OVERVIEW_H);
    octx.font = "600 11px system-ui, sans-serif";
    octx.textBaseline = "middle";
    octx.fillStyle = "#1b2430";
    octx.fillText("whole run", 8, OVERVIEW_H / 2);
    if (trace.start === null) return;
    var plotW = width - LABEL_W, range = (trace.end - trace.start) || 1;
    function ox(ns) { return LABEL_W + ((ns - trace.start) / range) * plotW; }
    // One thin row per level, outermost on top.
    var present = LEVELS.concat(["other"]).filter(function (level) { return levelsSeen[level]; });
    var rowH = Math.max(2, Math.floor((OVERVIEW_H - 4) / Math.max(1, present.length)));
    overviewSpans.forEach(function (span) {
      var row = present.indexOf(levelOf(span));
      if (row < 0) return;
      var x0 = ox(span.start_ns), x1 = ox(span.end_ns);
      octx.fillStyle = colour(span);
      octx.fillRect(x0, 2 + row * rowH, Math.max(1, x1 - x0), rowH - 1);
    });
    var v0 = ox(view.start), v1 = ox(view.end);
    octx.fillStyle = "rgba(27, 36, 48, 0.12)";
    octx.fillRect(LABEL_W, 0, Math.max(0, v0 - LABEL_W), OVERVIEW_H);
    octx.fillRect(v1, 0, Math.max(0, width - v1), OVERVIEW_H);
    octx.strokeStyle = "#1b2430";
    octx.lineWidth = 1.5;
    octx.strokeRect(v0 + 0.75, 0.75, Math.max(2, v1 - v0 - 1.5), OVERVIEW_H - 1.5);
    overview.dataset.window = Math.floor(view.start) + "-" + Math.ceil(view.end);
  }

  // Clicking or dragging on the strip moves the window there, keeping its length.
  var overviewDrag = false;
  function moveTo(clientX) {
    if (trace.start === null) return;
    var box = overview.getBoundingClientRect();
    var fraction = Math.min(1, Math.max(0, (clientX - box.left - LABEL_W) / (box.width - LABEL_W)));
    var centre = trace.start + fraction * (trace.end - trace.start);
    var half = (view.end - view.start) / 2;
    setWindow(centre - half, centre + half);
  }
  overview.addEventListener("mousedown", function (event) { overviewDrag = true; moveTo(event.clientX); });
  window.addEventListener("mousemove", function (event) { if (overviewDrag) moveTo(event.clientX); });
  window.addEventListener("mouseup", function () { overviewDrag = false; });

  /* ---- area selection: statistics of every span in a time range ---- */

  var area = null; // {from, to} in ns, while dragging or once chosen
  var areaPanel = document.getElementById("selection");

  function clearArea() {
    area = null;
    areaPanel.hidden = true;
    canvas.dataset.area = "";
    draw();
  }

  function readArea() {
    var start = Math.floor(Math.min(area.from, area.to)), end = Math.ceil(Math.max(area.from, area.to));
    canvas.dataset.area = start + "-" + end;
    var chosen = area;
    fetch(SELECTION + "?top=15&start=" + start + "&end=" + end,
      { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (body) { if (body && area === chosen) showArea(body); })
      .catch(function () {});
  }

  function cell(row, text, numeric) {
    var td = document.createElement("td");
    td.textContent = text;
    if (numeric) td.className = "num";
    row.appendChild(td);
  }

  function showArea(body) {
    var length = body.end - body.start;
    document.getElementById("selection-summary").textContent = body.total + " spans in "
      + duration(length) + ", from " + duration(body.start - trace.start) + " into the trace";
    var levels = document.getElementById("selection-levels").tBodies[0];
    levels.textContent = "";
    Object.keys(body.levels).sort(function (a, b) { return LEVELS.indexOf(a) - LEVELS.indexOf(b); })
      .forEach(function (level) {
        var tr = document.createElement("tr");
        tr.dataset.level = level;
        cell(tr, level || "—");
        cell(tr, String(body.levels[level]), true);
        var busy = body.busy_ns[level] || 0;
        cell(tr, (100 * busy / Math.max(1, length)).toFixed(1) + " %", true);
        levels.appendChild(tr);
      });
    var top = document.getElementById("selection-top").tBodies[0];
    top.textContent = "";
    body.top.forEach(function (row) {
      var tr = document.createElement("tr");
      tr.dataset.name = row.name;
      cell(tr, row.level || "—");
      cell(tr, row.name);
      cell(tr, row.op_type || "—");
      cell(tr, String(row.count), true);
      cell(tr, ms(row.inside_ns), true);
      top.appendChild(tr);
    });
    areaPanel.hidden = false;
    canvas.dataset.areaTotal = String(body.total);
  }

  document.getElementById("selection-zoom").addEventListener("click", function () {
    if (area) setWindow(Math.min(area.from, area.to), Math.max(area.from, area.to));
  });
  document.getElementById("selection-clear").addEventListener("click", clearArea);

  /* ---- interaction ---- */

  function zoom(factor, atNs) {
    if (trace.start === null) return;
    var centre = atNs === undefined ? (view.start + view.end) / 2 : atNs;
    var start = centre - (centre - view.start) * factor;
    var end = centre + (view.end - centre) * factor;
    setWindow(start, end);
  }
  function pan(fraction) {
    var shift = (view.end - view.start) * fraction;
    setWindow(view.start + shift, view.end + shift);
  }
  function reset() {
    if (trace.start !== null) setWindow(trace.start, trace.end);
  }
  function nsAt(clientX) {
    var box = canvas.getBoundingClientRect();
    var plotW = box.width - LABEL_W;
    var fraction = Math.min(1, Math.max(0, (clientX - box.left - LABEL_W) / plotW));
    return view.start + fraction * (view.end - view.start);
  }

  canvas.addEventListener("wheel", function (event) {
    if (trace.start === null) return;
    event.preventDefault();
    var delta = event.deltaMode === 1 ? event.deltaY * 16 : event.deltaY;
    zoom(Math.exp(delta * 0.002), nsAt(event.clientX));
  }, { passive: false });

  var drag = null;
  canvas.addEventListener("mousedown", function (event) {
    if (event.shiftKey && trace.start !== null) {
      // Shift+drag selects a time range: statistics of every span in it.
      event.preventDefault();
      area = { from: nsAt(event.clientX), to: nsAt(event.clientX), dragging: true };
      draw();
      return;
    }
    drag = { x: event.clientX, start: view.start, end: view.end, moved: false };
  });
  window.addEventListener("mousemove", function (event) {
    if (area && area.dragging) {
      area.to = nsAt(event.clientX);
      draw();
      return;
    }
    if (!drag) return;
    var dx = event.clientX - drag.x;
    if (Math.abs(dx) > 3) drag.moved = true;
    if (!drag.moved) return;
    var perPixel = (drag.end - drag.start) / Math.max(1, canvas.clientWidth - LABEL_W);
    canvas.classList.add("dragging");
    setWindow(drag.start - dx * perPixel, drag.end - dx * perPixel);
  });
  window.addEventListener("mouseup", function (event) {
    if (area && area.dragging) {
      area.dragging = false;
      if (Math.abs(area.to - area.from) < (view.end - view.start) / 500) clearArea();
      else readArea();
      return;
    }
    if (!drag) return;
    var wasDrag = drag.moved;
    drag = null;
    canvas.classList.remove("dragging");
    if (!wasDrag) pick(event);
  });

  function pick(event) {
    var box = canvas.getBoundingClientRect();
    var px = event.clientX - box.left, py = event.clientY - box.top;
    var found = null;
    for (var i = rects.length - 1; i >= 0; i--) {
      var r = rects[i];
      if (px >= r.x - 1 && px <= r.x + r.w + 1 && py >= r.y && py <= r.y + r.h) { found = r.span; break; }
    }
    select(found);
  }

  function select(span) {
    selected = span;
    canvas.dataset.selected = span ? span.span_id : "";
    var list = document.getElementById("details");
    document.getElementById("details-none").hidden = !!span;
    list.hidden = !span;
    list.textContent = "";
    if (span) {
      var rows = [
        ["Name", span.name], ["Level", span.level || "—"], ["Op type", span.op_type || "—"],
        ["Layer", span.layer_name ? span.layer_name + (span.layer_index !== null ? " (#" + span.layer_index + ")" : "") : "—"],
        ["Duration", duration(span.duration_ns)],
        ["Starts at", duration(span.start_ns - trace.start) + " into the trace"],
        ["Status", (STATUS[span.status] || String(span.status)) + (span.status_message ? ": " + span.status_message : "")],
        ["Span id", span.span_id], ["Parent", span.parent_span_id || "—"], ["Children", "…"],
      ];
      var attributes = span.attributes || {};
      Object.keys(attributes).sort().forEach(function (key) {
        var value = attributes[key];
        rows.push([key, typeof value === "object" ? JSON.stringify(value) : String(value)]);
      });
      rows.forEach(function (row) {
        var dt = document.createElement("dt");
        dt.textContent = row[0];
        var dd = document.createElement("dd");
        if (row[0] === "Parent" && span.parent_span_id) {
          dd.appendChild(spanLink(span.parent_span_id, span.parent_span_id, "parent"));
        } else if (row[0] === "Children") {
          dd.id = "details-children";
          dd.textContent = "…";
        } else {
          dd.textContent = row[1];
        }
        if (row[0].indexOf(".") >= 0 || /id$/.test(row[0]) || row[0] === "Parent") dd.className = "mono small";
        list.appendChild(dt);
        list.appendChild(dd);
      });
      loadFamily(span);
    }
    markRow(span);
    draw();
  }

  // A button that shows another span of the trace (its parent, a child), wherever it is.
  function spanLink(spanId, text, role) {
    var button = document.createElement("button");
    button.type = "button";
    button.className = "link span-link";
    button.dataset.role = role;
    button.dataset.spanId = spanId;
    button.textContent = text;
    button.addEventListener("click", function () {
      fetch(SPAN + spanId, { headers: { Accept: "application/json" }, credentials: "same-origin" })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (body) { if (body) goTo(body.span); })
        .catch(function () {});
    });
    return button;
  }

  // The selected span's parent (named) and children (each a link), from `/spans/<id>`.
  function loadFamily(span) {
    fetch(SPAN + span.span_id, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (body) {
        var cell = document.getElementById("details-children");
        if (!body || selected !== span || !cell) return;
        cell.textContent = "";
        if (!body.children.length) { cell.textContent = "none"; return; }
        body.children.forEach(function (child, index) {
          if (index) cell.appendChild(document.createTextNode(" "));
          var link = spanLink(child.span_id, child.name, "child");
          link.dataset.start = String(child.start_ns);
          link.addEventListener("click", function () { goTo(child); });
          cell.appendChild(link);
        });
        if (body.children.length >= body.max_children) {
          cell.appendChild(document.createTextNode(" (the first " + body.max_children + ")"));
        }
      })
      .catch(function () {});
  }

  // A span selects its row of the per-layer table (same level, name and batch size).
  function markRow(span) {
    var batch = span && span.attributes && span.attributes.batch_size !== undefined ? String(span.attributes.batch_size) : null;
    if (batch !== null && batchSelect.value !== batch && Array.prototype.some.call(batchSelect.options, function (o) { return o.value === batch; })) {
      batchSelect.value = batch;
      renderLayers(); // highlights the row
      return;
    }
    highlightRow(span, true);
  }

  function highlightRow(span, scroll) {
    Array.prototype.forEach.call(table.querySelectorAll("tr.current"), function (tr) {
      tr.classList.remove("current");
      tr.removeAttribute("aria-current");
    });
    if (!span) return;
    var row = Array.prototype.filter.call(table.tBodies[0].rows, function (tr) {
      return tr.dataset.name === span.name && (tr.dataset.level || "") === (span.level || "");
    })[0];
    if (row) {
      row.classList.add("current");
      row.setAttribute("aria-current", "true");
      if (scroll && row.scrollIntoView) row.scrollIntoView({ block: "nearest" });
    }
  }

  canvas.addEventListener("keydown", function (event) {
    var handled = true;
    if (event.key === "+" || event.key === "=") zoom(0.5);
    else if (event.key === "-" || event.key === "_") zoom(2);
    else if (event.key === "ArrowLeft") pan(-0.2);
    else if (event.key === "ArrowRight") pan(0.2);
    else if (event.key === "0") reset();
    else if (event.key === "Escape") { select(null); clearArea(); }
    else handled = false;
    if (handled) event.preventDefault();
  });
  document.getElementById("zoom-in").addEventListener("click", function () { zoom(0.5); });
  document.getElementById("zoom-out").addEventListener("click", function () { zoom(2); });
  document.getElementById("pan-left").addEventListener("click", function () { pan(-0.2); });
  document.getElementById("pan-right").addEventListener("click", function () { pan(0.2); });
  document.getElementById("zoom-reset").addEventListener("click", reset);
  search.addEventListener("input", runSearch);
  window.addEventListener("resize", draw);

  /* ---- the per-layer table ---- */

  var table = document.getElementById("layers");
  var aggregates = [];
  var sortKey = "total_ns", sortDescending = true;

  var NUMERIC = ["count", "total_ns", "mean_ns", "p50_ns", "p99_ns", "kernel_total_ns", "gflops"];

  // The layers' multiply-adds, as the evaluation's result counted them (`theoretical`): a
  // layer's GFLOP/s is 2 x MACs x batch size over its time per call (on a GPU its kernels').
  // ONNX Runtime names a fused node after its output tensor; `aliases` says whose it is.
  var counts = null;
  function countOf(name) {
    if (!counts) return null;
    return counts.layers[name] || counts.layers[counts.aliases[name.replace(/_nchwc$/, "")]] || null;
  }
  function gflopsOf(row) {
    var layer = countOf(row.name);
    var batch = Number(row.batch_size);
    if (!layer || !layer.macs || !batch) return null;
    var perCall = counts.gpu
      ? (row.kernel_total_ns ? row.kernel_total_ns / row.count : null)
      : row.p50_ns;  // the median call, as the roofline's points
    return perCall ? 2 * layer.macs * batch / perCall : null;  // FLOP/ns = GFLOP/s
  }
  function readCounts() {
    if (!EVALUATION) return;
    fetch(EVALUATION, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (body) {
        var details = body && body.result ? body.result.details || {} : {};
        var t = details.theoretical;
        if (!t || !t.counted) return;
        var layers = {};
        (t.layers || []).forEach(function (layer) { layers[layer.name] = layer; });
        counts = { layers: layers, aliases: t.aliases || {}, gpu: !!details.device && details.device !== "cpu" };
        renderLayers();
      })
      .catch(function () { /* the table goes without GFLOP/s */ });
  }

  // The table shows one level (layers, ops, GPU kernels, …) or all; never counter samples.
  var levelSelect = document.getElementById("layers-level");
  levelSelect.addEventListener("change", renderLayers);
  // And one batch size: statistics are never mixed across batch sizes. "none": the spans
  // outside any batch (the evaluation's own, its stages before batching).
  var batchSelect = document.getElementById("layers-batch");
  batchSelect.addEventListener("change", renderLayers);

  function batchOf(row) { return row.batch_size === null || row.batch_size === undefined ? "none" : String(row.batch_size); }

  function batchOptions(rows) {
    var present = {};
    rows.forEach(function (row) { present[batchOf(row)] = true; });
    var wanted = Object.keys(present).filter(function (key) { return key !== "none"; })
      .sort(function (a, b) { return Number(a) - Number(b); });
    if (present.none) wanted.push("none");
    var have = Array.prototype.map.call(batchSelect.options, function (o) { return o.value; });
    if (wanted.join(" ") === have.join(" ")) return;
    var chosen = batchSelect.value;
    batchSelect.textContent = "";
    wanted.forEach(function (key) {
      var option = document.createElement("option");
      option.value = key;
      option.textContent = key === "none" ? "outside batches" : key;
      batchSelect.appendChild(option);
    });
    batchSelect.value = wanted.indexOf(chosen) >= 0 ? chosen : (wanted[0] || "");
    batchSelect.disabled = wanted.length < 2;
  }

  function levelOptions(rows) {
    var present = {};
    rows.forEach(function (row) { present[levelOf(row)] = true; });
    var wanted = LEVELS.concat(["other"]).filter(function (level) { return present[level]; });
    var have = Array.prototype.map.call(levelSelect.options, function (o) { return o.value; }).slice(1);
    if (wanted.join(" ") === have.join(" ")) return;
    var chosen = levelSelect.value;
    while (levelSelect.options.length > 1) levelSelect.remove(1);
    wanted.forEach(function (level) {
      var option = document.createElement("option");
      option.value = level;
      option.textContent = level === "gpu" ? "gpu (kernels, copies)" : level;
      levelSelect.appendChild(option);
    });
    levelSelect.value = wanted.indexOf(chosen) >= 0 ? chosen : "";
  }

  function renderLayers() {
    var body = table.tBodies[0];
    body.textContent = "";
    var shown = aggregates.filter(function (row) { return !isCounter(row); });
    batchOptions(shown);
    shown = shown.filter(function (row) { return batchOf(row) === batchSelect.value; });
    table.dataset.batch = batchSelect.value;
    levelOptions(shown);
    if (levelSelect.value) {
      shown = shown.filter(function (row) { return levelOf(row) === levelSelect.value; });
    }
    table.dataset.level = levelSelect.value;
    // The kernels' time per layer (GPU traces): a column only when some layer has kernels.
    var kernels = aggregates.some(function (row) { return typeof row.kernel_total_ns === "number"; });
    table.querySelector('th[data-key="kernel_total_ns"]').hidden = !kernels;
    table.dataset.kernels = String(kernels);
    shown.forEach(function (row) { row.gflops = gflopsOf(row); });
    var achieved = shown.some(function (row) { return row.gflops !== null; });
    table.querySelector('th[data-key="gflops"]').hidden = !achieved;
    table.dataset.gflops = String(shown.filter(function (row) { return row.gflops !== null; }).length);
    if (!shown.length) {
      var empty = document.createElement("tr");
      empty.className = "empty";
      var cell = document.createElement("td");
      cell.colSpan = 8 + (kernels ? 1 : 0) + (achieved ? 1 : 0);
      cell.textContent = "No spans yet.";
      empty.appendChild(cell);
      body.appendChild(empty);
      return;
    }
    var rows = shown.slice().sort(function (a, b) {
      var left = a[sortKey], right = b[sortKey];
      if (NUMERIC.indexOf(sortKey) >= 0) {
        left = typeof left === "number" ? left : -1;
        right = typeof right === "number" ? right : -1;
      }
      var order = typeof left === "number" && typeof right === "number"
        ? left - right : String(left || "").localeCompare(String(right || ""));
      return sortDescending ? -order : order;
    });
    rows.forEach(function (row) {
      var tr = document.createElement("tr");
      tr.dataset.name = row.name;
      tr.dataset.level = row.level;
      // An op or kernel is one row per enclosing layer and op (its parent path), named with it.
      var named = row.parent ? row.name + " ‹ " + row.parent : row.name;
      [row.level || "—", named, row.op_type || "—"].forEach(function (text) {
        var td = document.createElement("td");
        td.textContent = text;
        tr.appendChild(td);
      });
      [String(row.count), ms(row.total_ns), ms(row.mean_ns), ms(row.p50_ns), ms(row.p99_ns)].forEach(function (text, index) {
        var td = document.createElement("td");
        td.className = "num";
        td.dataset.key = ["count", "total_ns", "mean_ns", "p50_ns", "p99_ns"][index];
        td.textContent = text;
        tr.appendChild(td);
      });
      if (kernels) {
        var td = document.createElement("td");
        td.className = "num";
        td.dataset.key = "kernel_total_ns";
        td.textContent = typeof row.kernel_total_ns === "number" ? ms(row.kernel_total_ns) : "—";
        if (row.kernel_count) td.title = row.kernel_count + " kernels";
        tr.appendChild(td);
      }
      if (achieved) {
        var cell = document.createElement("td");
        cell.className = "num";
        cell.dataset.key = "gflops";
        cell.textContent = row.gflops === null ? "—" : row.gflops.toFixed(1);
        tr.appendChild(cell);
      }
      tr.addEventListener("click", function () { search.value = row.name; runSearch(); });
      body.appendChild(tr);
    });
    highlightRow(selected, false);
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
      th.setAttribute("aria-sort", th.dataset.key === sortKey ? (sortDescending ? "descending" : "ascending") : "none");
    });
  }

  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
    th.querySelector("button").addEventListener("click", function () {
      var key = th.dataset.key;
      if (key === sortKey) sortDescending = !sortDescending;
      else {
        sortKey = key;
        sortDescending = th.classList.contains("num");
      }
      renderLayers();
    });
  });

  function fetchLayers() {
    return fetch(LAYERS, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (response) {
        if (!response.ok) throw new Error("the hub answered " + response.status);
        return response.json();
      })
      .then(function (body) {
        aggregates = body.aggregates || [];
        var before = Object.keys(levelsSeen).length;
        aggregates.forEach(function (row) { if (!isCounter(row)) levelsSeen[levelOf(row)] = true; });
        table.dataset.spans = String(body.span_count || 0);
        renderLayers();
        if (Object.keys(levelsSeen).length !== before) draw();
      })
      .catch(function () { /* the timeline's status line says when the hub is unreachable */ });
  }

  /* ---- live: read again when spans arrive while the evaluation runs ---- */

  // The evaluation's WebSocket says when spans arrived (a `spans` event) and when it finished;
  // without a socket (or once it closed), the page reads the evaluation every 2 s instead.
  var refreshTimer = null;

  function setLive(mode) { canvas.dataset.live = mode; }

  // Spans arrive many times a second while the model runs: the window is read again at most
  // every 100 ms and the per-layer table (statistics over every span so far) every 2 s, each
  // after the arrivals that asked for it, so that a steady stream never starves them.
  var layersTimer = null, layersAt = 0;

  function reload() {
    if (inFlight) { readAgain = true; return reloadLayers(); }
    if (refreshTimer === null) {
      refreshTimer = setTimeout(function () {
        refreshTimer = null;
        fetchWindow();
      }, 100);
    }
    reloadLayers();
  }

  function reloadLayers() {
    if (layersTimer === null) {
      var wait = finished ? 250 : Math.max(250, layersAt + 2000 - Date.now());
      layersTimer = setTimeout(function () {
        layersTimer = null;
        layersAt = Date.now();
        fetchLayers();
      }, wait);
    }
  }

  // A failed or cancelled run keeps what it measured: say that its timeline is partial.
  function ended(status) {
    if (status === "failed" || status === "cancelled") {
      var notice = document.getElementById("timeline-partial");
      notice.textContent = "This evaluation " + (status === "failed" ? "failed" : "was cancelled")
        + ": its timeline holds the spans measured before it stopped (partial).";
      notice.hidden = false;
    }
  }

  function poll() {
    setLive(finished ? "done" : "polling");
    if (finished) return;
    fetch(EVALUATION, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (body) {
        if (body && liveEvaluation.finished(body.status)) {
          finished = true;
          readCounts();
          ended(body.status);
        }
        return Promise.all([fetchWindow(), fetchLayers()]);
      })
      .catch(function () {})
      .then(function () {
        if (finished) setLive("done");
        else setTimeout(poll, 2000);
      });
  }

  function connect() {
    var socket = liveEvaluation.socket(script.dataset.socket);
    if (!socket) {
      setTimeout(poll, 2000);
      return;
    }
    socket.addEventListener("open", function () { setLive("socket"); });
    socket.addEventListener("message", function (event) {
      var message = JSON.parse(event.data);
      if (message.type === "spans") reload();
      if (message.type === "status" && liveEvaluation.finished(message.status)) {
        finished = true;
        readCounts();
        ended(message.status);
        reload();
        socket.close();
      }
    });
    socket.addEventListener("close", function () {
      if (finished) setLive("done");
      else setTimeout(poll, 2000);
    });
  }

  fetchWindow();
  fetchLayers();
  if (finished) readCounts();
  if (finished) setLive("done");
  else connect();
})();
