// Live parts of the console: an element with data-poll="URL" is refreshed every data-every seconds
// from that URL (an HTML fragment) while the tab is visible. An element that also has
// data-signature (a job's status line) reloads the page when the job changed, unless the user has
// started filling in a form: then it only says so, so nothing typed is lost.
(function () {
  "use strict";

  function formsEdited() {
    return Array.prototype.some.call(document.querySelectorAll("main form[method=post]"), function (form) {
      return Array.prototype.some.call(form.elements, function (el) {
        if (el.type === "hidden" || el.type === "submit") { return false; }
        if (el.type === "checkbox" || el.type === "radio") { return el.checked !== el.defaultChecked; }
        return typeof el.defaultValue === "string" && el.value !== el.defaultValue;
      });
    });
  }

  function watch(el) {
    var every = Math.max(1, Number(el.getAttribute("data-every") || 5)) * 1000;
    var busy = false;

    function refresh() {
      if (document.hidden || busy) { return; }
      busy = true;
      fetch(el.getAttribute("data-poll"), {credentials: "same-origin", redirect: "manual",
                                           headers: {"Accept": "text/html"}})
        .then(function (response) {
          // Signed out meanwhile (redirected to the sign-in page): reload, which leads there.
          if (response.type === "opaqueredirect" || response.status === 401) {
            window.location.reload();
            return null;
          }
          return response.ok ? response.text() : null;
        })
        .then(function (html) {
          if (html === null) { return; }
          el.innerHTML = html;
          var expected = el.getAttribute("data-signature");
          var now = el.querySelector("[data-signature]");
          if (expected && now && now.getAttribute("data-signature") !== expected) {
            if (formsEdited()) {
              var notice = document.getElementById("job-changed");
              if (notice) { notice.hidden = false; }
            } else {
              window.location.reload();
            }
          }
        })
        .catch(function () { /* the next tick tries again */ })
        .then(function () { busy = false; });
    }

    window.setInterval(refresh, every);
    document.addEventListener("visibilitychange", function () { if (!document.hidden) { refresh(); } });
  }

  // A filter form leaves its empty fields out of the URL (shorter links to share).
  function compact(form) {
    form.addEventListener("submit", function () {
      Array.prototype.forEach.call(form.elements, function (el) {
        if (el.name && el.value === "" && el.type !== "checkbox") { el.disabled = true; }
      });
      window.setTimeout(function () {
        Array.prototype.forEach.call(form.elements, function (el) { el.disabled = false; });
      }, 0);
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    Array.prototype.forEach.call(document.querySelectorAll("[data-poll]"), watch);
    Array.prototype.forEach.call(document.querySelectorAll("form.filters"), compact);
  });
})();
