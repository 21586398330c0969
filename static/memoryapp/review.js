// The reviewers' queue: decide without reloading, and from the keyboard.
// j/k move, x select, a approve, e edit the value, r reject (type or pick a reason, Enter),
// A / R approve / reject the selection, Esc leaves a field. Without this script the forms still post.
(() => {
  "use strict";
  const root = document.getElementById("review");
  if (!root) return;
  const url = root.dataset.url;
  const flashBox = document.getElementById("rq-flash");
  const left = document.getElementById("rq-left");
  const selectedCount = document.getElementById("rq-selected");
  const bulk = document.getElementById("bulk");
  let current = null;

  const open = () => [...root.querySelectorAll(".rq-card:not(.rq-done)")];
  const all = () => [...root.querySelectorAll(".rq-card")];

  function flash(text, good) {
    flashBox.textContent = text || "";
    flashBox.classList.toggle("rq-good", !!good);
  }

  function focusCard(card) {
    if (!card) return;
    if (current) current.classList.remove("rq-current");
    current = card;
    card.classList.add("rq-current");
    card.scrollIntoView({ block: "nearest" });
    card.focus({ preventScroll: true });
  }

  function move(step) {
    const cards = all();
    if (!cards.length) return;
    let i = cards.indexOf(current);
    i = i < 0 ? 0 : Math.max(0, Math.min(cards.length - 1, i + step));
    focusCard(cards[i]);
  }

  function nextOpen(card) {
    const cards = open().filter((c) => c !== card);
    const after = cards.find((c) => card.compareDocumentPosition(c) & Node.DOCUMENT_POSITION_FOLLOWING);
    return after || cards[cards.length - 1] || null;
  }

  function countSelected() {
    const n = root.querySelectorAll(".rq-check:checked").length;
    selectedCount.textContent = String(n);
    return n;
  }

  function settle(card, status, message) {
    card.classList.add("rq-done", "rq-" + status);
    card.querySelectorAll("input, textarea, button").forEach((el) => (el.disabled = true));
    const check = card.querySelector(".rq-check");
    if (check) check.checked = false;
    card.querySelector(".rq-result").textContent = message;
    if (left) left.textContent = String(Math.max(0, Number(left.textContent) - 1));
  }

  async function post(data) {
    data.set("csrfmiddlewaretoken", document.querySelector("[name=csrfmiddlewaretoken]").value);
    const response = await fetch(url, {
      method: "POST",
      body: data,
      headers: { "X-Requested-With": "fetch" },
      credentials: "same-origin",
    });
    try {
      return await response.json();
    } catch (e) {
      return { ok: false, message: "The server did not answer (" + response.status + ")." };
    }
  }

  async function decide(card, action) {
    if (!card || card.classList.contains("rq-done")) return;
    const form = card.querySelector("form.rq-decide");
    if (action === "reject" && !form.elements.reason.value.trim()) {
      focusCard(card);
      form.elements.reason.focus();
      flash("Say why: type or pick a reason, then Enter.");
      return;
    }
    const data = new FormData(form);
    data.set("action", action);
    const next = nextOpen(card);
    const body = await post(data);
    if (!body.ok) {
      flash(body.message || "That did not work.");
      return;
    }
    flash(body.message, true);
    settle(card, body.status, body.message);
    countSelected();
    focusCard(next || card);
  }

  async function decideSelected(action) {
    const checked = [...root.querySelectorAll(".rq-check:checked")];
    if (!checked.length) {
      flash("Select items first (x).");
      return;
    }
    if (action === "bulk_reject" && !bulk.elements.reason.value.trim()) {
      bulk.elements.reason.focus();
      flash("Say why the selection is rejected, then Enter.");
      return;
    }
    const data = new FormData(bulk);
    data.set("action", action);
    const body = await post(data);
    if (!body.ok) {
      flash(body.message || "That did not work.");
      return;
    }
    flash(body.message, true);
    const last = checked[checked.length - 1].closest(".rq-card");
    const next = nextOpen(last);
    checked.forEach((box) => settle(box.closest(".rq-card"), body.status, body.status === "active" ? "Approved." : "Rejected."));
    bulk.elements.reason.value = "";
    countSelected();
    focusCard(next);
  }

  root.addEventListener("submit", (event) => {
    const form = event.target;
    const button = event.submitter;
    event.preventDefault();
    const action = button ? button.value : form === bulk ? "bulk_reject" : "reject";
    if (form === bulk) decideSelected(action);
    else decide(form.closest(".rq-card"), action);
  });

  root.addEventListener("click", (event) => {
    const card = event.target.closest(".rq-card");
    if (card) focusCard(card);
  });

  root.addEventListener("change", (event) => {
    if (event.target.id === "rq-all") {
      open().forEach((card) => (card.querySelector(".rq-check").checked = event.target.checked));
    }
    countSelected();
  });

  root.addEventListener("input", (event) => {
    const value = event.target.closest(".rq-value");
    if (!value) return;
    const edited = value.value.trim() !== (value.dataset.original || "").trim();
    value.classList.toggle("rq-edited", edited);
    const approve = value.form.querySelector(".rq-approve");
    approve.firstChild.textContent = edited ? "Save & approve " : "Approve ";
  });

  document.addEventListener("keydown", (event) => {
    const target = event.target;
    const typing = target.matches && target.matches("input[type=text], input:not([type]), textarea, select");
    if (typing) {
      if (event.key === "Escape") {
        target.blur();
        if (current) current.focus({ preventScroll: true });
      } else if (event.key === "Enter" && target.classList.contains("rq-value") && !event.shiftKey) {
        event.preventDefault();
        decide(target.closest(".rq-card"), "approve");
      }
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    switch (event.key) {
      case "j":
      case "ArrowDown":
        move(1);
        break;
      case "k":
      case "ArrowUp":
        move(-1);
        break;
      case "x":
        if (current && !current.classList.contains("rq-done")) {
          const box = current.querySelector(".rq-check");
          box.checked = !box.checked;
          countSelected();
        }
        break;
      case "a":
        decide(current, "approve");
        break;
      case "r":
        decide(current, "reject");
        break;
      case "e":
        if (current && !current.classList.contains("rq-done")) {
          const value = current.querySelector(".rq-value");
          value.focus();
          value.select();
        }
        break;
      case "A":
        decideSelected("bulk_approve");
        break;
      case "R":
        decideSelected("bulk_reject");
        break;
      default:
        return;
    }
    event.preventDefault();
  });

  focusCard(open()[0]);
})();
