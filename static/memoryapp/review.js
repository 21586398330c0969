// The reviewers' queue: decide without reloading, and from the keyboard.
// j/k move, x select, a approve (or keep the chosen value of a slot), e edit the value,
// r reject (type or pick a reason, Enter), 1-9 choose a value of a slot, u undo the last decision,
// A / R approve / reject the selection, Esc leaves a field. Without this script the forms still post.
// The filter form is left alone: it is a plain GET, with or without the script.
(() => {
  "use strict";
  const root = document.getElementById("review");
  if (!root) return;
  const url = root.dataset.url;
  const flashBox = document.getElementById("rq-flash");
  const left = document.getElementById("rq-left");
  const selectedCount = document.getElementById("rq-selected");
  const bulk = document.getElementById("bulk");
  const undoForm = document.getElementById("rq-undo");
  const undoButton = document.getElementById("rq-undo-button");
  // The decisions made on this page, newest last: {decision, cards, status, kept}.
  const decisions = [];
  let current = null;

  const open = () => [...root.querySelectorAll(".rq-card:not(.rq-done)")];
  const all = () => [...root.querySelectorAll(".rq-card")];
  const idsOf = (card) => (card.dataset.ids || card.dataset.id || "").split(",").filter(Boolean);
  const isChoice = (card) => card.classList.contains("rq-choice");

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
    const n = [...root.querySelectorAll(".rq-check:checked")].reduce(
      (sum, box) => sum + box.value.split(",").filter(Boolean).length,
      0,
    );
    selectedCount.textContent = String(n);
    return n;
  }

  // Counters: the suggestions waiting (the server's count under the filters) and each group's open ones.
  function recount(waiting) {
    if (left && typeof waiting === "number") left.textContent = String(waiting);
    root.querySelectorAll(".rq-group").forEach((group) => {
      const n = [...group.querySelectorAll(".rq-card:not(.rq-done)")].reduce((sum, c) => sum + idsOf(c).length, 0);
      const badge = group.querySelector(".rq-n");
      if (badge) badge.textContent = String(n);
    });
    countSelected();
  }

  function setUndo() {
    const last = decisions[decisions.length - 1];
    undoButton.disabled = !last;
    undoForm.elements.decision.value = last ? last.decision : "";
  }

  function settle(card, status, message, kept) {
    card.classList.add("rq-done", "rq-" + status);
    card.querySelectorAll("input, textarea, button").forEach((el) => (el.disabled = true));
    const check = card.querySelector(".rq-check");
    if (check) check.checked = false;
    if (kept) {
      card.querySelectorAll(".rq-option").forEach((option) => {
        const radio = option.querySelector("input[name=keep]");
        option.classList.toggle("rq-kept", !!radio && radio.value === kept);
      });
    }
    card.querySelector(".rq-result").textContent = message;
  }

  function unsettle(card, restored) {
    card.classList.remove("rq-done", "rq-active", "rq-rejected", "rq-superseded");
    card.querySelectorAll(".rq-option").forEach((option) => option.classList.remove("rq-kept"));
    card.querySelectorAll("input, textarea, button").forEach((el) => (el.disabled = false));
    card.querySelector(".rq-result").textContent = "";
    const values = new Map(restored.map((r) => [r.id, r.value]));
    card.querySelectorAll("input[name=keep]").forEach((radio) => {
      if (values.has(radio.value)) radio.dataset.value = values.get(radio.value);
    });
    const value = card.querySelector(".rq-value");
    const chosen = card.querySelector("input[name=keep]:checked");
    const original = chosen ? chosen.dataset.value : values.get(card.dataset.id);
    if (value && original !== undefined) {
      value.value = original;
      value.dataset.original = original;
      value.classList.remove("rq-edited");
      approveLabel(value);
    }
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
    if (isChoice(card)) action = action === "approve" ? "choose" : "reject_all";
    if ((action === "reject" || action === "reject_all") && !form.elements.reason.value.trim()) {
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
    settle(card, body.status === "active" || action === "choose" ? "active" : body.status, body.message, body.kept);
    decisions.push({ decision: body.decision, cards: [card] });
    setUndo();
    recount(body.waiting);
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
    const cards = checked.map((box) => box.closest(".rq-card"));
    const next = nextOpen(cards[cards.length - 1]);
    cards.forEach((card) => settle(card, body.status, body.status === "active" ? "Approved." : "Rejected."));
    bulk.elements.reason.value = "";
    decisions.push({ decision: body.decision, cards });
    setUndo();
    recount(body.waiting);
    focusCard(next);
  }

  async function undo() {
    const last = decisions[decisions.length - 1];
    const decision = last ? last.decision : undoForm.elements.decision.value;
    if (!decision) {
      flash("Nothing to undo.");
      return;
    }
    const data = new FormData(undoForm);
    data.set("decision", decision);
    const body = await post(data);
    if (!body.ok) {
      flash(body.message || "That did not work.");
      return;
    }
    if (last) decisions.pop();
    setUndo();
    const restored = body.items || [];
    const touched = new Set();
    restored.forEach((r) => {
      const card = all().find((c) => idsOf(c).includes(r.id));
      if (card) touched.add(card);
    });
    touched.forEach((card) => unsettle(card, restored));
    flash(body.message, true);
    recount(body.waiting);
    const first = [...touched][0];
    if (first) focusCard(first);
  }

  function choose(card, n) {
    if (!card || !isChoice(card) || card.classList.contains("rq-done")) return;
    const radios = [...card.querySelectorAll("input[type=radio][name=keep]")];
    const radio = radios[n - 1];
    if (!radio) return;
    radio.checked = true;
    chosen(radio);
  }

  // The chosen value of a slot goes into the value field, to keep as it is or edit.
  function chosen(radio) {
    const card = radio.closest(".rq-card");
    const value = card.querySelector(".rq-value");
    value.value = radio.dataset.value;
    value.dataset.original = radio.dataset.value;
    value.classList.remove("rq-edited");
    approveLabel(value);
  }

  function approveLabel(value) {
    const edited = value.value.trim() !== (value.dataset.original || "").trim();
    value.classList.toggle("rq-edited", edited);
    const approve = value.form.querySelector(".rq-approve");
    if (!approve.dataset.label) approve.dataset.label = approve.firstChild.textContent;
    approve.firstChild.textContent = edited
      ? isChoice(value.closest(".rq-card"))
        ? "Save & keep, reject the others "
        : "Save & approve "
      : approve.dataset.label;
  }

  root.addEventListener("submit", (event) => {
    const form = event.target;
    // Only the decision forms are posted by the script; the filter form goes as it is (GET).
    if (!(form === bulk || form === undoForm || form.classList.contains("rq-decide"))) return;
    const button = event.submitter;
    event.preventDefault();
    if (form === undoForm) {
      undo();
      return;
    }
    const action = button ? button.value : form === bulk ? "bulk_reject" : "reject";
    if (form === bulk) decideSelected(action);
    else decide(form.closest(".rq-card"), action === "choose" ? "approve" : action === "reject_all" ? "reject" : action);
  });

  root.addEventListener("click", (event) => {
    const card = event.target.closest(".rq-card");
    if (card) focusCard(card);
  });

  root.addEventListener("change", (event) => {
    if (event.target.id === "rq-all") {
      open().forEach((card) => (card.querySelector(".rq-check").checked = event.target.checked));
    }
    if (event.target.name === "keep" && event.target.type === "radio") chosen(event.target);
    countSelected();
  });

  root.addEventListener("input", (event) => {
    const value = event.target.closest(".rq-value");
    if (value) approveLabel(value);
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
      return; // Enter in the person box submits the filter form, as the browser does
    }
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (/^[1-9]$/.test(event.key)) {
      choose(current, Number(event.key));
      event.preventDefault();
      return;
    }
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
      case "u":
        undo();
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
