// bae console: small progressive enhancements over server-rendered pages.
// Every page works without it except the live session stream.
(function () {
  "use strict";

  // Filters submit as soon as a picker changes.
  document.querySelectorAll("select[data-autosubmit]").forEach(function (sel) {
    sel.addEventListener("change", function () { sel.form.submit(); });
  });

  // Copy buttons (the one-time key).
  document.querySelectorAll("[data-copy]").forEach(function (btn) {
    btn.addEventListener("click", function () {
      var el = document.querySelector(btn.getAttribute("data-copy"));
      if (!el || !navigator.clipboard) return;
      navigator.clipboard.writeText(el.textContent.trim()).then(function () {
        btn.textContent = "Copied";
      });
    });
  });

  // Live session: the server streams new timeline rows, the redrawn
  // transcript and state changes; it ends the stream when the session is
  // over ("end") or the login is no longer valid ("logout").
  var head = document.getElementById("session");
  if (!head || head.getAttribute("data-live") !== "true" || !window.EventSource) return;
  var id = head.getAttribute("data-session");
  var after = head.getAttribute("data-after") || "0";
  var timeline = document.getElementById("timeline");
  var transcript = document.getElementById("transcript");
  var live = document.getElementById("live");
  var es = new EventSource("/sessions/" + encodeURIComponent(id) + "/stream?after=" + encodeURIComponent(after));

  function nearBottom(el) {
    return el.getBoundingClientRect().bottom - window.innerHeight < 120;
  }
  es.addEventListener("open", function () { live.hidden = false; });
  es.addEventListener("timeline", function (ev) {
    var tpl = document.createElement("template");
    tpl.innerHTML = ev.data;
    tpl.content.querySelectorAll("li").forEach(function (li) { li.classList.add("fresh"); });
    timeline.appendChild(tpl.content);
    head.setAttribute("data-after", ev.lastEventId);
  });
  es.addEventListener("transcript", function (ev) {
    var stick = nearBottom(transcript);
    // Keep open tool cards open across redraws.
    var open = {};
    transcript.querySelectorAll("details[open] .tool-body .small").forEach(function (n) { open[n.textContent] = true; });
    transcript.innerHTML = ev.data;
    transcript.querySelectorAll("details.tool").forEach(function (d) {
      var n = d.querySelector(".tool-body .small");
      if (n && open[n.textContent]) d.open = true;
    });
    if (stick) transcript.lastElementChild && transcript.lastElementChild.scrollIntoView({ block: "end" });
  });
  es.addEventListener("state", function (ev) {
    document.querySelectorAll(".session-head [data-state]").forEach(function (b) {
      b.textContent = ev.data;
      b.className = "badge state-" + ev.data;
    });
  });
  es.addEventListener("end", function () {
    es.close();
    live.hidden = true;
  });
  es.addEventListener("logout", function (ev) {
    es.close();
    // Only a path on this console is followed; anything else reloads the
    // page, which lands on the login form if the login really ended.
    var to;
    try { to = new URL(ev.data, window.location.href); } catch (e) { to = null; }
    if (to && to.origin === window.location.origin && ev.data.charAt(0) === "/" && ev.data.charAt(1) !== "/" && ev.data.charAt(1) !== "\\") {
      window.location.assign(to.pathname + to.search);
    } else {
      window.location.reload();
    }
  });
  es.addEventListener("error", function () {
    // A refused reconnect (login expired, server gone) closes the source:
    // reload, which lands on the login page if that is the reason.
    if (es.readyState === EventSource.CLOSED) {
      live.hidden = true;
      window.setTimeout(function () { window.location.reload(); }, 2000);
    }
  });
})();
