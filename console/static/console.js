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

  // Compaction boundaries expand to the original events they cover,
  // fetched from the console when first opened (the server escapes them).
  var sessionHead = document.getElementById("session");
  var originals = {}; // "from-through" -> fetched HTML
  function wireOriginals(root) {
    if (!sessionHead) return;
    var sid = sessionHead.getAttribute("data-session");
    root.querySelectorAll("details.originals").forEach(function (d) {
      var key = d.getAttribute("data-from") + "-" + d.getAttribute("data-through");
      var body = d.querySelector(".originals-body");
      if (originals[key] !== undefined) body.innerHTML = originals[key];
      d.addEventListener("toggle", function () {
        if (!d.open || originals[key] !== undefined) return;
        var url = "/sessions/" + encodeURIComponent(sid) + "/events?from=" + encodeURIComponent(d.getAttribute("data-from")) +
          "&through=" + encodeURIComponent(d.getAttribute("data-through"));
        fetch(url, { credentials: "same-origin", redirect: "follow" }).then(function (resp) {
          // A login that ran out answers with the login page: go there.
          if (new URL(resp.url).pathname === "/login") { window.location.reload(); return null; }
          if (!resp.ok) throw new Error("HTTP " + resp.status);
          return resp.text();
        }).then(function (html) {
          if (html === null) return;
          originals[key] = html;
          body.innerHTML = html;
        }).catch(function (err) {
          body.textContent = "Could not load the original events (" + err.message + "); they are in the timeline.";
        });
      });
    });
  }
  wireOriginals(document);

  // Live approvals: the server sends the pending cards whenever the set
  // changes. A card already on the page is kept as it is (the operator may
  // be editing its arguments); new ones are added, decided ones removed.
  var approvalsHead = document.getElementById("approvals");
  if (approvalsHead && window.EventSource) {
    var cards = document.getElementById("approval-cards");
    var liveMark = document.getElementById("live");
    var aes = new EventSource("/approvals/stream?have=" + encodeURIComponent(approvalsHead.getAttribute("data-have") || ""));
    aes.addEventListener("open", function () { liveMark.hidden = false; });
    aes.addEventListener("approvals", function (ev) {
      var tpl = document.createElement("template");
      tpl.innerHTML = ev.data;
      var fresh = {};
      tpl.content.querySelectorAll("article[data-approval]").forEach(function (a) { fresh[a.getAttribute("data-approval")] = a; });
      cards.querySelectorAll("article[data-approval]").forEach(function (a) {
        if (!fresh[a.getAttribute("data-approval")]) a.remove();
      });
      var prev = null;
      Object.keys(fresh).forEach(function (id) {
        var have = document.getElementById(id);
        if (!have) {
          have = fresh[id];
          have.classList.add("fresh");
          if (prev) prev.after(have); else cards.prepend(have);
        }
        prev = have;
      });
      var none = document.getElementById("no-approvals");
      if (none) none.remove();
      if (!cards.querySelector("article[data-approval]")) {
        var p = document.createElement("p");
        p.className = "muted";
        p.id = "no-approvals";
        p.textContent = "Nothing is waiting for a decision.";
        cards.appendChild(p);
      }
    });
    aes.addEventListener("logout", function (ev) {
      aes.close();
      if (ev.data.charAt(0) === "/" && ev.data.charAt(1) !== "/" && ev.data.charAt(1) !== "\\") window.location.assign(ev.data);
      else window.location.reload();
    });
    aes.addEventListener("error", function () {
      if (aes.readyState === EventSource.CLOSED) {
        liveMark.hidden = true;
        window.setTimeout(function () { window.location.reload(); }, 2000);
      }
    });
  }

  // Live session: the server streams new timeline rows, the redrawn
  // transcript, running turns' answers as they are written ("delta"), and
  // state changes; it ends the stream when the session is over ("end") or
  // the login is no longer valid ("logout").
  var head = sessionHead;
  if (!head || head.getAttribute("data-live") !== "true" || !window.EventSource) return;
  var id = head.getAttribute("data-session");
  var after = head.getAttribute("data-after") || "0";
  var timeline = document.getElementById("timeline");
  var transcript = document.getElementById("transcript");
  var live = document.getElementById("live");
  var es = new EventSource("/sessions/" + encodeURIComponent(id) + "/stream?after=" + encodeURIComponent(after));

  // Live answers, per turn: the latest iteration's content blocks, built
  // from deltas as text only (they are the model's output, untrusted).
  var RUN_SPAN = 1000000; // a run's deltas are numbered run*RUN_SPAN+1, +2, …
  var answers = {};
  function turnArticle(turnId) {
    var found = null;
    transcript.querySelectorAll("article.turn").forEach(function (a) {
      if (a.getAttribute("data-turn") === turnId) found = a;
    });
    return found;
  }
  function drawAnswer(turnId) {
    var st = answers[turnId];
    var article = turnArticle(turnId);
    if (!article) return; // drawn when the transcript shows the turn
    if (article.getAttribute("data-done") === "true") {
      // The stored answer (or failure) is in the transcript: it replaces
      // the live text.
      delete answers[turnId];
      if (st && st.el) st.el.remove();
      return;
    }
    if (!st.el) {
      st.el = document.createElement("div");
      st.el.className = "bubble assistant typing";
      st.el.setAttribute("aria-live", "polite");
    }
    st.el.textContent = "";
    var who = document.createElement("div");
    who.className = "who";
    who.textContent = "assistant";
    st.el.appendChild(who);
    var shown = 0;
    Object.keys(st.blocks).sort(function (a, b) { return a - b; }).forEach(function (i) {
      var b = st.blocks[i];
      var n = document.createElement("div");
      if (b.tool !== undefined) {
        n.className = "note";
        n.textContent = "calling " + (b.tool || "a tool") + "…";
      } else if (b.thinking !== undefined) {
        // Thinking is shown collapsed, as in the transcript.
        n = document.createElement("details");
        n.className = "thinking";
        var sum = document.createElement("summary");
        sum.className = "muted";
        sum.textContent = "thinking…";
        n.appendChild(sum);
        var body = document.createElement("div");
        body.className = "text";
        body.textContent = b.thinking;
        n.appendChild(body);
      } else {
        n.className = "text";
        n.textContent = b.text;
      }
      st.el.appendChild(n);
      shown++;
    });
    if (st.broken || shown === 0) {
      var note = document.createElement("div");
      note.className = "note";
      note.textContent = st.broken ? "(live text interrupted; the answer appears when the turn ends)" : "…";
      st.el.appendChild(note);
    }
    if (st.el.parentNode !== article) article.appendChild(st.el);
  }
  function applyDelta(d) {
    if (d.type === "reset") {
      Object.keys(answers).forEach(function (t) {
        if (!d.turn_id || d.turn_id === t) { answers[t].blocks = {}; answers[t].broken = true; drawAnswer(t); }
      });
      if (d.turn_id && !answers[d.turn_id]) {
        answers[d.turn_id] = { iteration: -1, seq: 0, blocks: {}, broken: true };
        drawAnswer(d.turn_id);
      }
      return;
    }
    var st = answers[d.turn_id];
    if (!st) st = answers[d.turn_id] = { iteration: d.iteration, seq: 0, blocks: {}, broken: false };
    if (d.seq <= st.seq) return; // already applied (a resumed stream)
    st.seq = d.seq;
    if (d.iteration !== st.iteration || d.seq % RUN_SPAN === 1) {
      // A new provider call: a new answer from its first piece.
      st.iteration = d.iteration;
      st.blocks = {};
      st.broken = false;
    }
    if (st.broken) return;
    switch (d.type) {
      case "superseded":
        st.blocks = {}; // the partial output so far is void
        break;
      case "block_start":
        if (d.block && d.block.type === "tool_use") {
          st.blocks[d.index] = { tool: typeof d.block.name === "string" ? d.block.name : "" };
        } else if (d.block && (d.block.type === "thinking" || d.block.type === "redacted_thinking")) {
          st.blocks[d.index] = { thinking: "" };
        } else if (!st.blocks[d.index]) {
          st.blocks[d.index] = { text: d.block && typeof d.block.text === "string" ? d.block.text : "" };
        }
        break;
      case "thinking_delta":
        if (!st.blocks[d.index] || st.blocks[d.index].thinking === undefined) st.blocks[d.index] = { thinking: "" };
        st.blocks[d.index].thinking += d.thinking || "";
        break;
      case "text_delta":
        if (!st.blocks[d.index] || st.blocks[d.index].tool !== undefined) st.blocks[d.index] = { text: "" };
        st.blocks[d.index].text += d.text || "";
        break;
      default:
        return; // tool input pieces are shown with the stored call
    }
    drawAnswer(d.turn_id);
  }

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
  es.addEventListener("delta", function (ev) {
    var stick = nearBottom(transcript);
    var batch;
    try { batch = JSON.parse(ev.data); } catch (e) { return; }
    if (!Array.isArray(batch)) return;
    batch.forEach(applyDelta);
    if (stick && transcript.lastElementChild) transcript.lastElementChild.scrollIntoView({ block: "end" });
  });
  es.addEventListener("transcript", function (ev) {
    var stick = nearBottom(transcript);
    // Keep open tool cards and compaction boundaries open across redraws.
    var open = {};
    transcript.querySelectorAll("details[open] .tool-body .small").forEach(function (n) { open[n.textContent] = true; });
    var openComp = {};
    transcript.querySelectorAll("details.compaction[open]").forEach(function (d) { openComp[d.getAttribute("data-compaction")] = d.querySelector("details.originals").open; });
    transcript.innerHTML = ev.data;
    transcript.querySelectorAll("details.tool").forEach(function (d) {
      var n = d.querySelector(".tool-body .small");
      if (n && open[n.textContent]) d.open = true;
    });
    transcript.querySelectorAll("details.compaction").forEach(function (d) {
      var k = d.getAttribute("data-compaction");
      if (k in openComp) { d.open = true; d.querySelector("details.originals").open = openComp[k]; }
    });
    wireOriginals(transcript);
    Object.keys(answers).forEach(function (t) { if (answers[t].el) answers[t].el.remove(); drawAnswer(t); });
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
