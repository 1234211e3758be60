// The console's own script (docs/console.md). No inline script exists anywhere in the console
// (the Content-Security-Policy forbids it), so everything a page does in the browser is here:
// times in the browser's zone (UTC stays on hover), the CSRF token put into forms that arrived
// through a live update, and the charts.
(function () {
  "use strict";

  function csrfToken() {
    var meta = document.querySelector('meta[name="dl-csrf"]');
    return meta ? meta.getAttribute("content") : "";
  }

  function localTimes(root) {
    root.querySelectorAll("time[datetime]:not([data-local])").forEach(function (el) {
      var moment = new Date(el.getAttribute("datetime"));
      if (!isNaN(moment.getTime())) {
        el.textContent = moment.toLocaleString();
        el.setAttribute("data-local", "1");
      }
    });
  }

  function fillCsrf(root) {
    var token = csrfToken();
    root.querySelectorAll('input[name="csrf"]').forEach(function (el) {
      if (!el.value) { el.value = token; }
    });
  }

  var charts = [];

  function drawCharts(root) {
    if (typeof uPlot === "undefined") { return; }
    root.querySelectorAll(".chart[data-chart]:not([data-drawn])").forEach(function (el) {
      var data = JSON.parse(el.getAttribute("data-chart"));
      var name = el.getAttribute("data-series");
      var rate = name === "failure_rate";
      var opts = {
        width: Math.max(el.clientWidth, 200),
        height: 180,
        legend: { show: false },
        scales: rate ? { y: { range: [0, 100] } } : {},
        series: [{}, {
          label: rate ? "failure rate %" : "jobs per hour",
          stroke: rate ? "#b3261e" : "#1f4e79",
          fill: rate ? "rgba(179,38,30,0.10)" : "rgba(31,78,121,0.12)",
          width: 2,
          spanGaps: false
        }],
        axes: [{}, { size: 50 }]
      };
      el.setAttribute("data-drawn", "1");
      charts.push({ el: el, plot: new uPlot(opts, [data.x, data[name]], el) });
    });
  }

  function fixUp(root) {
    localTimes(root);
    fillCsrf(root);
    drawCharts(root);
  }

  document.addEventListener("DOMContentLoaded", function () {
    fixUp(document);
    // Live fragments (server-sent events) replace parts of the page: fix up what arrived.
    new MutationObserver(function (changes) {
      changes.forEach(function (change) {
        change.addedNodes.forEach(function (node) {
          if (node.nodeType === 1) { fixUp(node.parentNode || node); }
        });
      });
    }).observe(document.body, { childList: true, subtree: true });
    var pending = null;
    window.addEventListener("resize", function () {
      clearTimeout(pending);
      pending = setTimeout(function () {
        charts.forEach(function (c) { c.plot.setSize({ width: Math.max(c.el.clientWidth, 200), height: 180 }); });
      }, 150);
    });
  });
})();
