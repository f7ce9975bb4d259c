// The replay clock: shows each element from its data-t0 (until data-t1) and grows bars.
(function () {
  "use strict";
  var svg = document.getElementById("lanes");
  if (!svg) { return; }
  var duration = parseFloat(svg.getAttribute("data-duration")) || 1;
  var timed = Array.prototype.slice.call(document.querySelectorAll("[data-t0]"));
  var cursor = document.getElementById("cursor");
  var x0 = parseFloat(cursor.getAttribute("data-x0"));
  var scale = parseFloat(cursor.getAttribute("data-scale"));
  var counters = Array.prototype.slice.call(document.querySelectorAll("[data-counter]"));
  var log = document.getElementById("log");
  var play = document.getElementById("play");
  var speed = document.getElementById("speed");
  var scrub = document.getElementById("scrub");
  var clock = document.getElementById("clock");
  var t = 0, playing = true, last = null, shownLines = -1;

  function counted(kind) {
    var n = 0;
    timed.forEach(function (el) {
      if (el.style.display !== "none" && (" " + (el.getAttribute("data-count") || "") + " ").indexOf(" " + kind + " ") >= 0) { n += 1; }
    });
    return n;
  }

  function draw() {
    var lines = 0;
    timed.forEach(function (el) {
      var t0 = parseFloat(el.getAttribute("data-t0"));
      var t1 = el.hasAttribute("data-t1") ? parseFloat(el.getAttribute("data-t1")) : Infinity;
      var grows = el.classList.contains("grow");
      var visible = t >= t0 && (grows || t < t1);
      el.style.display = visible ? "" : "none";
      if (visible && grows) {
        var full = parseFloat(el.getAttribute("data-w"));
        var part = t1 === Infinity || t1 <= t0 ? 1 : Math.min(1, (t - t0) / (t1 - t0));
        el.setAttribute("width", Math.max(1, full * part).toFixed(1));
      }
      if (visible && el.tagName === "LI") { lines += 1; }
    });
    var x = (x0 + t * scale).toFixed(1);
    cursor.setAttribute("x1", x);
    cursor.setAttribute("x2", x);
    var claims = document.querySelectorAll("g.bar");
    var shownClaims = 0, shownReclaims = 0;
    Array.prototype.forEach.call(claims, function (g) {
      if (g.style.display !== "none") {
        shownClaims += 1;
        if (g.querySelector("rect[stroke]")) { shownReclaims += 1; }
      }
    });
    counters.forEach(function (c) {
      var kind = c.getAttribute("data-counter");
      c.textContent = kind === "claim" ? shownClaims : kind === "reclaim" ? shownReclaims : counted(kind);
    });
    if (lines !== shownLines) { shownLines = lines; log.scrollTop = log.scrollHeight; }
    scrub.value = t.toFixed(2);
    clock.textContent = t.toFixed(2) + " s / " + duration.toFixed(2) + " s";
    play.innerHTML = playing ? "&#10074;&#10074; pause" : "&#9654; play";
  }

  function frame(now) {
    if (playing) {
      if (last !== null) { t = Math.min(duration, t + (now - last) / 1000 * parseFloat(speed.value)); }
      last = now;
      if (t >= duration) { playing = false; last = null; }
      draw();
    }
    window.requestAnimationFrame(frame);
  }

  play.addEventListener("click", function () {
    if (!playing && t >= duration) { t = 0; }
    playing = !playing;
    last = null;
    draw();
  });
  scrub.addEventListener("input", function () {
    t = parseFloat(scrub.value);
    playing = false;
    last = null;
    draw();
  });
  // #t=6.5 or #t=end opens the replay paused at that moment (links, screenshots)
  var at = /^#t=(end|[0-9.]+)$/.exec(window.location.hash);
  if (at) {
    t = at[1] === "end" ? duration : Math.min(duration, parseFloat(at[1]) || 0);
    playing = false;
  }
  document.getElementById("controls").hidden = false;
  draw();
  window.requestAnimationFrame(frame);
}());
