/* kvselect: small progressive enhancements. Every page works without JavaScript. */
(function () {
  "use strict";

  function onReady(fn) {
    if (document.readyState !== "loading") fn(); else document.addEventListener("DOMContentLoaded", fn);
  }

  // A refusal re-rendered by an action URL (…/start/, …/action/, …/sign/upload/) shows the page it
  // belongs to: the address bar says that page, and a reload opens it instead of posting again.
  function pageUrl() {
    var url = document.body.dataset.pageUrl;
    if (url && window.history && window.location.pathname !== url) {
      window.history.replaceState(null, "", url + window.location.hash);
    }
  }

  // A file over the upload limit is refused before it is sent (a 200 MiB upload would otherwise
  // travel to the server only to be refused there).
  function fileLimits(root) {
    root.querySelectorAll("input[type=file][data-max-bytes]").forEach(function (input) {
      var note = document.createElement("p");
      note.className = "errorlist"; note.setAttribute("role", "alert"); note.hidden = true;
      input.insertAdjacentElement("afterend", note);
      function tooLarge() {
        var max = Number(input.dataset.maxBytes);
        return Array.prototype.some.call(input.files || [], function (f) { return f.size > max; });
      }
      function check() { note.hidden = !tooLarge(); note.textContent = note.hidden ? "" : input.dataset.tooLarge; }
      input.addEventListener("change", check);
      if (input.form) input.form.addEventListener("submit", function (event) {
        if (tooLarge()) { event.preventDefault(); check(); input.focus(); }
      });
    });
  }

  // Language switcher: submit on change.
  function autosubmit(root) {
    root.querySelectorAll("select[data-autosubmit]").forEach(function (select) {
      select.addEventListener("change", function () { select.form.submit(); });
    });
  }

  // Weights: show each relative value as a live normalised percentage, rounded to 0.1 % so that
  // the column adds up to exactly 100.0 % (largest remainder, as selection.domain.criteria.percentages).
  function percentages(values) {
    var total = 0, keys = Object.keys(values), floors = {}, left = 1000;
    keys.forEach(function (k) { total += values[k]; });
    if (total <= 0) return null;
    keys.forEach(function (k) { floors[k] = Math.floor(values[k] * 1000 / total); left -= floors[k]; });
    keys.slice().sort(function (a, b) {
      return (floors[a] - values[a] * 1000 / total) - (floors[b] - values[b] * 1000 / total);
    }).slice(0, left).forEach(function (k) { floors[k] += 1; });
    keys.forEach(function (k) { floors[k] = floors[k] / 10; });
    return floors;
  }

  function weights(root) {
    root.querySelectorAll("form[data-weights-form]").forEach(function (form) {
      var inputs = form.querySelectorAll("input[data-weight-input]");
      var total = form.querySelector("output[data-weight-total]");
      function update() {
        var values = {}, sum = 0;
        inputs.forEach(function (input) {
          var v = parseFloat(input.value);
          values[input.dataset.weightInput] = v > 0 ? v : 0;
          if (v > 0) sum += v;
        });
        var shares = percentages(values);
        inputs.forEach(function (input) {
          var out = form.querySelector('output[data-weight-output="' + input.dataset.weightInput + '"]');
          if (!out) return;
          out.textContent = shares && parseFloat(input.value) >= 0 ? shares[input.dataset.weightInput].toFixed(1) + "%" : "—";
        });
        if (total) total.textContent = sum > 0 ? String(Math.round(sum * 100) / 100) : "0";
      }
      inputs.forEach(function (input) { input.addEventListener("input", update); });
      update();
    });
  }

  // Gates: warn as soon as more than the recommended number of gates is ticked.
  function gates(root) {
    root.querySelectorAll("form[data-gates-form]").forEach(function (form) {
      var max = parseInt(form.dataset.maxGates || "3", 10);
      var warning = document.querySelector("[data-gate-warning]");
      var count = form.querySelector("output[data-gate-count]");
      var boxes = form.querySelectorAll("input[data-gate-toggle]");
      function update() {
        var n = 0;
        boxes.forEach(function (box) { if (box.checked) n += 1; });
        if (count) count.textContent = String(n);
        if (warning) warning.hidden = n <= max;
      }
      boxes.forEach(function (box) { box.addEventListener("change", update); });
      update();
    });
  }

  // Candidates: suggest the catalog's documented versions of the chosen engine.
  function candidates(root) {
    root.querySelectorAll("form[data-candidate-form]").forEach(function (form) {
      var dataNode = document.getElementById("engine-versions-json");
      var select = form.querySelector("select[data-engine-select]");
      var list = document.getElementById("engine-versions");
      if (!dataNode || !select || !list) return;
      var versions = JSON.parse(dataNode.textContent || "{}");
      function update() {
        list.innerHTML = "";
        (versions[select.value] || []).forEach(function (v) {
          var option = document.createElement("option");
          option.value = v;
          list.appendChild(option);
        });
      }
      select.addEventListener("change", update);
      update();
    });
  }

  // Copy buttons: copy the text of the element named by data-copy (the one-time token, the curl example).
  function copyButtons(root) {
    root.querySelectorAll("button[data-copy]").forEach(function (button) {
      button.addEventListener("click", function () {
        var target = document.querySelector(button.dataset.copy);
        if (!target) return;
        var text = target.value !== undefined && target.tagName === "INPUT" ? target.value : target.textContent;
        var label = button.textContent;
        function done() { button.textContent = "✓"; setTimeout(function () { button.textContent = label; }, 1500); }
        if (navigator.clipboard && window.isSecureContext) {
          navigator.clipboard.writeText(text).then(done, function () { selectText(target); });
        } else {
          selectText(target);
          try { if (document.execCommand("copy")) done(); } catch (e) { /* the text stays selected for Ctrl+C */ }
        }
      });
    });
  }

  function selectText(node) {
    if (node.select) { node.select(); return; }
    var range = document.createRange();
    range.selectNodeContents(node);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  // Destructive forms (revoke, cancel) ask first; works for plain and htmx submissions.
  function confirms(root) {
    root.querySelectorAll("form[data-confirm]").forEach(function (form) {
      form.addEventListener("submit", function (event) {
        if (!window.confirm(form.dataset.confirm)) { event.preventDefault(); event.stopImmediatePropagation(); }
      }, true);
    });
  }

  // Slow submissions (verifying a PDF): after a second, show the form's progress note and an
  // indeterminate bar, and keep the button from being pressed twice.
  function busy(root) {
    root.querySelectorAll("form[data-busy]").forEach(function (form) {
      form.addEventListener("submit", function () {
        var note = form.querySelector("[data-busy-note]");
        var button = form.querySelector("button[type=submit]");
        setTimeout(function () {
          if (note) note.hidden = false;
          if (button) { button.disabled = true; button.setAttribute("aria-busy", "true"); }
        }, 1000);
      });
    });
  }

  // Time zone: the server shows times in the zone the browser reports (kept in a cookie).
  function timeZone() {
    var zone;
    try { zone = Intl.DateTimeFormat().resolvedOptions().timeZone; } catch (e) { return; }
    if (!zone) return;
    var current = (document.cookie.match(/(?:^|; )kvselect_tz=([^;]*)/) || [])[1];
    if (current !== encodeURIComponent(zone)) {
      document.cookie = "kvselect_tz=" + encodeURIComponent(zone) + "; path=/; max-age=31536000; samesite=lax";
    }
  }

  // Error pages: offer the previous page when there is one on this site.
  function historyBack(root) {
    root.querySelectorAll("a[data-history-back]").forEach(function (link) {
      if (window.history.length < 2 || !document.referrer || document.referrer.indexOf(location.origin) !== 0) return;
      link.hidden = false;
      link.addEventListener("click", function (event) { event.preventDefault(); window.history.back(); });
    });
  }

  function init(root) {
    autosubmit(root); weights(root); gates(root); candidates(root); copyButtons(root); confirms(root); historyBack(root);
    fileLimits(root);
    busy(root);
  }
  timeZone();
  onReady(function () { pageUrl(); init(document); });
  document.addEventListener("htmx:load", function (event) { if (event.target !== document.body) init(event.target); });
})();
