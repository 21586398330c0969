/* A thread's conversation page: bring the turn a link points at into view and mark it.
   `?entry=<id>` is drawn marked by the server; a bare fragment (`#<id>` or `#entry-<id>`, as the
   review queue links) names a turn that may lie on another page of a long thread: then the page
   asks the server for the window around it. Works without this script, except that last step. */
(function () {
  "use strict";
  function entryFromHash() {
    var hash = decodeURIComponent(window.location.hash.slice(1));
    if (!hash) return "";
    return hash.indexOf("entry-") === 0 ? hash.slice(6) : hash;
  }
  function show(entryId) {
    var turn = document.getElementById("entry-" + entryId);
    if (!turn) return false;
    var marked = document.querySelectorAll(".cv-turn.anchor");
    for (var i = 0; i < marked.length; i++) if (marked[i] !== turn) marked[i].classList.remove("anchor");
    turn.classList.add("anchor");
    turn.scrollIntoView({ block: "center" });
    return true;
  }
  function go() {
    var entryId = entryFromHash();
    if (!entryId) {
      var anchored = document.querySelector(".cv-turn.anchor");
      if (anchored) anchored.scrollIntoView({ block: "center" });
      return;
    }
    if (show(entryId)) return;
    // Another element of the page (the admin's "skip to content" link): not a turn.
    if (window.location.hash.indexOf("#entry-") !== 0 && document.getElementById(entryId)) return;
    if (entryId.length > 40) return;
    var params = new URLSearchParams(window.location.search);
    if (params.get("entry") === entryId) return; // asked already: the server said it is not here
    window.location.replace(window.location.pathname + "?entry=" + encodeURIComponent(entryId) + "#entry-" + encodeURIComponent(entryId));
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", go);
  else go();
  window.addEventListener("hashchange", go);
})();
