/* Job runs (admin): while a run shown on the page is queued or running, ask the server for its
   progress every two seconds and redraw its bar and numbers; when one ends, reload the page once,
   so what only the server draws (its result, links, time taken) shows. Stop when none is open. */
(function () {
  "use strict";
  var PERIOD_MS = 2000;
  function openRuns() {
    var found = {};
    var bars = document.querySelectorAll(".jr-progress[data-open='1']");
    for (var i = 0; i < bars.length; i++) found[bars[i].getAttribute("data-run")] = true;
    return Object.keys(found);
  }
  function redraw(run) {
    var bars = document.querySelectorAll(".jr-progress[data-run='" + run.id + "']");
    for (var i = 0; i < bars.length; i++) {
      var bar = bars[i];
      var meter = bar.querySelector("progress");
      if (run.total) {
        if (!meter) { meter = document.createElement("progress"); bar.insertBefore(meter, bar.firstChild); }
        meter.max = run.total;
        meter.value = run.done;
      }
      var text = bar.querySelector(".jr-text");
      if (text) text.textContent = run.text;
      bar.setAttribute("data-open", run.open ? "1" : "");
      bar.setAttribute("data-status", run.status);
      var row = bar.closest("tr");
      var status = row && row.querySelector(".field-status_shown, .field-status");
      if (status) status.textContent = run.status_label;
    }
  }
  function poll() {
    var root = document.getElementById("jobruns");
    var ids = openRuns();
    if (!root || !ids.length) return;
    var url = root.getAttribute("data-progress-url") + "?ids=" + ids.join(",");
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : { runs: [] }; })
      .then(function (body) {
        var ended = false;
        (body.runs || []).forEach(function (run) { redraw(run); if (!run.open) ended = true; });
        if (ended) { window.location.reload(); return; }
        if (openRuns().length) window.setTimeout(poll, PERIOD_MS);
      })
      .catch(function () { window.setTimeout(poll, PERIOD_MS * 3); });
  }
  function start() { if (openRuns().length) window.setTimeout(poll, PERIOD_MS); }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
