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

  controls.forEach(function (control) { control.addEventListener("change", apply); });
  apply();
})();
