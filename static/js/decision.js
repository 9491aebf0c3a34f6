/* kvselect comparison and records pages: small enhancements; every page works without JavaScript. */
(function () {
  "use strict";
  document.addEventListener("DOMContentLoaded", function () {
    // The "include SIMULATED evidence" toggle reloads the comparison at once.
    document.querySelectorAll("input[data-autosubmit-check]").forEach(function (box) {
      box.addEventListener("change", function () { box.form.submit(); });
    });
    // Ask before including simulated evidence in a draft record.
    document.querySelectorAll("form[data-record-form]").forEach(function (form) {
      var box = form.querySelector("input[name=include_simulated]");
      var warning = form.querySelector("[data-simulated-warning]");
      if (!box || !warning) return;
      function update() { warning.hidden = !box.checked; }
      box.addEventListener("change", update);
      update();
    });
  });
})();
