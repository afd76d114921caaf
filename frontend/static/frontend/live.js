// What the pages of one evaluation (its page and its timeline) share about following it live:
// which statuses are final (the hub hands over `predictors.protocol.FINISHED` on this script's
// tag, frontend/_live.html), and the evaluation's WebSocket on this host.
var liveEvaluation = (function () {
  "use strict";
  var FINISHED = document.getElementById("live-script").dataset.finished.split(" ");
  return {
    // Whether an evaluation in this status will not change again.
    finished: function (status) { return FINISHED.indexOf(status) >= 0; },
    // The WebSocket at `path` of this host (wss:// under https), or null where it cannot open.
    socket: function (path) {
      var scheme = location.protocol === "https:" ? "wss://" : "ws://";
      try {
        return new WebSocket(scheme + location.host + path);
      } catch (error) {
        return null;
      }
    }
  };
})();
