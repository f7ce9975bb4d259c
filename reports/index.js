// Filters and sorting of the index; without JavaScript every run is listed, newest first.
(function () {
  "use strict";
  var table = document.getElementById("runs");
  if (!table) { return; }
  var body = table.tBodies[0];
  var rows = Array.prototype.slice.call(body.rows);
  var controls = ["f-flow", "f-status", "f-period", "f-sort"].map(function (id) {
    return document.getElementById(id);
  });
  var shown = document.getElementById("shown");
  var names = ["flow", "status", "period", "sort"];

  // The choice lives in the query string, so a live index that reloads itself
  // (engine reports serve) and a copied link keep it.
  var query = new URLSearchParams(window.location.search);
  controls.forEach(function (control, i) {
    var value = query.get(names[i]);
    var known = Array.prototype.some.call(control.options, function (o) { return o.value === value; });
    if (value !== null && known) { control.value = value; }
  });

  function remember() {
    var chosen = new URLSearchParams();
    controls.forEach(function (control, i) {
      if (control.value && control.value !== control.options[0].value) {
        chosen.set(names[i], control.value);
      }
    });
    var search = chosen.toString();
    try {
      window.history.replaceState(null, "", search ? "?" + search : window.location.pathname);
    } catch (e) {
      // a page opened from disk may not rewrite its address; the filters still apply
    }
  }

  function apply() {
    var flow = controls[0].value, status = controls[1].value, period = controls[2].value;
    var sort = controls[3].value, count = 0;
    rows.sort(function (a, b) {
      var key = sort.indexOf("duration") === 0 ? "duration" : "created";
      var x = parseFloat(a.dataset[key] || "-1"), y = parseFloat(b.dataset[key] || "-1");
      return sort.slice(-4) === "desc" ? y - x : x - y;
    });
    rows.forEach(function (row) {
      var visible = (!flow || row.dataset.flow === flow) &&
        (!status || row.dataset.status === status) &&
        (!period || row.dataset.period === period);
      row.classList.toggle("hidden", !visible);
      if (visible) { count += 1; }
      body.appendChild(row);
    });
    shown.textContent = String(count);
  }

  controls.forEach(function (control) {
    control.addEventListener("change", function () { apply(); remember(); });
  });
  apply();
})();
