// The chat page: Enter sends, live answers over Server-Sent Events; while an answer runs
// the composer queues (Enter), steers (Steer) or stops (Stop, Esc); Copy on
// code blocks. No inline script anywhere (the CSP forbids it).
//
// The stream (agentplatform/web/chat/stream.py) sends server-rendered, escaped HTML: each
// message is {"ops": [...]}, an op appends to, replaces or places an element by id. This file
// never builds markup from data itself.
"use strict";

(() => {
  const streams = new Map(); // element id -> EventSource

  function composer() {
    return document.getElementById("composer");
  }

  function setBusy(busy) {
    const form = composer();
    if (!form || form.hasAttribute("data-locked")) return;
    form.toggleAttribute("data-busy", busy);
    // Files go with a new turn only: uploading waits while an answer works.
    for (const control of form.querySelectorAll("input[type=file], .attach-upload")) control.disabled = busy;
    // The answer is in: the keyboard goes on in the composer, unless something else has the focus.
    const field = document.getElementById("composer-input");
    const idle = !document.activeElement || document.activeElement === document.body;
    if (!busy && field && !field.disabled && idle) field.focus();
  }

  // Stop the answer at work: its footer's Stop form (the last one on the page).
  function stopCurrent() {
    const buttons = document.querySelectorAll("#thread [data-stop]");
    if (buttons.length === 0) return false;
    buttons[buttons.length - 1].click();
    return true;
  }

  // A message sent from the composer: the form itself (Send, Queue) or its Steer button;
  // not the other requests of elements inside it (removing an attached file).
  function sendsMessage(element) {
    const form = composer();
    return Boolean(form && element && (element === form || element.hasAttribute("data-sends")));
  }

  function nearBottom() {
    return window.innerHeight + window.scrollY >= document.body.scrollHeight - 120;
  }

  function fragment(html) {
    const template = document.createElement("template");
    template.innerHTML = html.trim();
    return template.content;
  }

  function activate(nodes) {
    for (const node of nodes) {
      if (node.nodeType !== Node.ELEMENT_NODE) continue;
      if (window.htmx) window.htmx.process(node);
      connectWithin(node); // a turn started from the queue: follow it too
    }
  }

  function apply(op) {
    const target = op.target ? document.getElementById(op.target) : null;
    if (op.op === "append") {
      if (target) target.insertAdjacentHTML("beforeend", op.html);
    } else if (op.op === "replace") {
      const content = fragment(op.html);
      const nodes = Array.from(content.childNodes);
      const fresh = content.firstElementChild;
      if (target) {
        // Keep an open tool card open while it updates.
        if (fresh && target.tagName === "DETAILS" && fresh.tagName === "DETAILS" && target.open) {
          fresh.open = true;
        }
        target.replaceWith(content);
      } else {
        const parent = op.parent ? document.getElementById(op.parent) : null;
        if (!parent) return;
        parent.append(content);
      }
      activate(nodes);
      for (const node of nodes) addCopyButtons(node.parentElement);
    } else if (op.op === "place") {
      // "Earlier messages summarised": where the reloaded page puts it (thread.py,
      // _place_summaries): at the start of the turn after the one holding the last message
      // it covers (that turn itself when it is the last), after the summaries already there.
      const content = fragment(op.html);
      if (target) {
        content.firstElementChild.open = target.open;
        target.replaceWith(content);
        return;
      }
      const covered = document.getElementById(op.after);
      const turn = covered && covered.closest("#thread > .turn");
      if (!turn) return;
      let next = turn.nextElementSibling;
      while (next && !next.matches(".turn")) next = next.nextElementSibling;
      const into = next || turn;
      let before = into.firstElementChild;
      while (before && before.matches("details.compacted")) before = before.nextElementSibling;
      into.insertBefore(content, before);
    }
  }

  function connect(element) {
    const url = element.dataset.streamUrl;
    if (!url || streams.has(element.id)) return;
    const source = new EventSource(url);
    streams.set(element.id, source);
    element.setAttribute("aria-busy", "true");
    setBusy(true);
    const finish = () => {
      source.close();
      streams.delete(element.id);
      element.removeAttribute("data-stream-url");
      element.removeAttribute("aria-busy");
      if (streams.size === 0) setBusy(false);
    };
    source.onmessage = (event) => {
      const follow = nearBottom();
      const { ops } = JSON.parse(event.data);
      let ended = false;
      for (const op of ops) {
        if (op.op === "end") ended = true;
        else apply(op);
      }
      if (follow) window.scrollTo(0, document.body.scrollHeight);
      if (ended) finish();
    };
    source.onerror = () => {
      // CONNECTING: the browser retries by itself (with Last-Event-ID). CLOSED: it gave up.
      if (source.readyState === EventSource.CLOSED) {
        const state = document.getElementById(`${element.id}-state`);
        if (state) state.textContent = "The live answer was interrupted. Reload the page to see the rest.";
        finish();
      }
    };
  }

  function connectWithin(root) {
    if (!root || !root.querySelectorAll) return;
    if (root.matches && root.matches("[data-stream-url]")) connect(root);
    for (const element of root.querySelectorAll("[data-stream-url]")) connect(element);
  }

  // Enter sends, Shift+Enter (or an IME composition) adds a line.
  document.addEventListener("keydown", (event) => {
    const field = event.target;
    if (!(field instanceof HTMLTextAreaElement) || !field.hasAttribute("data-enter-sends")) return;
    if (event.key !== "Enter" || event.shiftKey || event.isComposing) return;
    event.preventDefault();
    if (field.disabled || field.value.trim() === "") return;
    field.form.requestSubmit();
  });

  // Arrow up in an empty composer edits the person's last message (its Edit form opens with
  // the text); Escape in that form closes it and goes back to the composer.
  document.addEventListener("keydown", (event) => {
    const field = event.target;
    if (!(field instanceof HTMLTextAreaElement)) return;
    if (field.hasAttribute("data-up-edits") && event.key === "ArrowUp" && field.value === "") {
      const edits = document.querySelectorAll("#thread .msg.user details.edit-message");
      const last = edits[edits.length - 1];
      if (!last) return;
      event.preventDefault();
      last.open = true;
      const text = last.querySelector("textarea");
      text.focus();
      text.setSelectionRange(text.value.length, text.value.length);
      last.scrollIntoView({ block: "nearest" });
    } else if (event.key === "Escape" && field.closest("details.edit-message")) {
      field.closest("details.edit-message").open = false;
      const input = document.getElementById("composer-input");
      if (input) input.focus();
    }
  });

  // Esc stops the answer at work (the composer's Stop does the same).
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape" || event.isComposing || event.defaultPrevented) return; // a menu took it
    if (event.target.closest && event.target.closest("details.edit-message")) return; // closes it
    const field = event.target.closest && event.target.closest("input, select, textarea");
    if (field && field.id !== "composer-input") return; // e.g. an approval's reason being typed
    const form = composer();
    if (!form || !form.hasAttribute("data-busy")) return;
    if (stopCurrent()) event.preventDefault();
  });

  document.addEventListener("click", (event) => {
    const button = event.target.closest && event.target.closest("[data-stop-current]");
    if (button) stopCurrent();
  });

  document.addEventListener("htmx:beforeRequest", (event) => {
    if (sendsMessage(event.detail.elt)) {
      for (const id of ["composer-notice", "composer-info"]) {
        const element = document.getElementById(id);
        if (element) element.textContent = "";
      }
    }
  });

  document.addEventListener("htmx:afterRequest", (event) => {
    const form = composer();
    const xhr = event.detail.xhr;
    if (!form || !sendsMessage(event.detail.elt) || !event.detail.successful || !xhr) return;
    if (xhr.getResponseHeader("X-Chat-Status")) return; // refused: the text stays
    const info = xhr.getResponseHeader("X-Chat-Info");
    const element = document.getElementById("composer-info");
    if (info && element) element.textContent = info;
    form.reset();
    const chips = document.getElementById("composer-attachments");
    if (chips) chips.replaceChildren(); // sent with the message
  });

  // A new turn: only the last answer offers Regenerate.
  document.addEventListener("htmx:afterSwap", (event) => {
    if (event.detail.target && event.detail.target.id === "thread") {
      const forms = document.querySelectorAll("#thread .regenerate");
      forms.forEach((form, index) => {
        if (index < forms.length - 1 || !form.closest(".turn:last-child")) form.remove();
      });
    }
  });

  document.addEventListener("htmx:responseError", (event) => {
    const notice = document.getElementById("composer-notice");
    const status = event.detail.xhr ? event.detail.xhr.status : 0;
    if (notice) {
      notice.textContent =
        status === 403
          ? "You are not allowed to do that here."
          : `That did not work (HTTP ${status}). Reload the page and try again.`;
    }
  });

  // Attachments: the composer's file input, drag-and-drop onto the composer and paste into
  // the message upload each file at once (agentplatform/web/chat/attachments.py). The server
  // answers the file's chip (server-rendered, escaped) or a refusal as plain text, which is
  // shown as text.
  function attachInput() {
    return document.getElementById("attach-input");
  }

  function csrfToken() {
    const field = document.querySelector("#composer input[name=csrfmiddlewaretoken]");
    return field ? field.value : "";
  }

  async function upload(files) {
    const input = attachInput();
    const chips = document.getElementById("composer-attachments");
    const notice = document.getElementById("composer-notice");
    if (!input || !chips || input.disabled || files.length === 0) return;
    if (notice) notice.textContent = "";
    for (const file of Array.from(files)) {
      const body = new FormData();
      body.append("file", file, file.name);
      let response;
      try {
        response = await fetch(input.dataset.attachUrl, {
          method: "POST",
          body,
          credentials: "same-origin",
          headers: { "X-CSRFToken": csrfToken(), "HX-Request": "true" },
        });
      } catch {
        if (notice) notice.textContent = "The upload failed: check the connection and try again.";
        continue;
      }
      const text = await response.text();
      if (response.ok) {
        chips.insertAdjacentHTML("beforeend", text);
        activate([chips.lastElementChild]);
      } else if (notice) {
        notice.textContent = response.status === 400 ? `${file.name}: ${text}` : `The upload failed (HTTP ${response.status}).`;
      }
    }
    input.value = "";
  }

  // The New chat form's files: chosen, dropped or pasted, they wait in its file input (a
  // chip each, cloned from the page's <template>, the name set as text) and go with the
  // first message (agentplatform/web/chat/views.py `new`). With files the form is sent by
  // fetch, so that a refusal keeps them and the text; the reason is shown as text.
  const newChatFiles = [];

  function newChatForm() {
    return document.getElementById("new-chat-form");
  }

  function newChatInput() {
    return document.getElementById("new-attach-input");
  }

  function newChatNotice(text) {
    const notice = document.getElementById("new-notice");
    if (notice) notice.textContent = text;
  }

  function sizeText(bytes) {
    if (bytes >= 1048576) return `${(bytes / 1048576).toFixed(1)} MB`;
    return bytes >= 1024 ? `${Math.round(bytes / 1024)} KB` : `${bytes} bytes`;
  }

  function newChatShow() {
    const input = newChatInput();
    const chips = document.getElementById("new-attachments");
    const template = document.getElementById("new-chip");
    if (!input || !chips || !template) return;
    const kept = new DataTransfer();
    for (const file of newChatFiles) kept.items.add(file);
    input.files = kept.files;
    chips.replaceChildren();
    newChatFiles.forEach((file, index) => {
      const chip = template.content.firstElementChild.cloneNode(true);
      chip.querySelector(".attachment-name").textContent = file.name;
      chip.querySelector(".attachment-meta").textContent = `${file.type || "file"} · ${sizeText(file.size)}`;
      const remove = chip.querySelector(".attachment-remove");
      remove.setAttribute("aria-label", `Remove ${file.name}`);
      remove.dataset.index = String(index);
      chips.append(chip);
    });
  }

  function newChatAdd(files) {
    const input = newChatInput();
    if (!input) return;
    const limit = Number(input.dataset.maxBytes || 0);
    newChatNotice("");
    for (const file of Array.from(files)) {
      if (limit && file.size > limit) newChatNotice(`${file.name}: the file is larger than ${sizeText(limit)}.`);
      else newChatFiles.push(file);
    }
    newChatShow();
  }

  document.addEventListener("click", (event) => {
    const remove = event.target.closest && event.target.closest("#new-attachments .attachment-remove");
    if (!remove) return;
    newChatFiles.splice(Number(remove.dataset.index), 1);
    newChatShow();
  });

  document.addEventListener("submit", async (event) => {
    const form = event.target;
    if (form !== newChatForm() || newChatFiles.length === 0) return; // text only: as a form
    event.preventDefault();
    const button = form.querySelector("button[type=submit]");
    if (button.disabled) return;
    button.disabled = true;
    newChatNotice("");
    try {
      const response = await fetch(form.action, {
        method: "POST",
        body: new FormData(form),
        credentials: "same-origin",
        headers: { "HX-Request": "true" },
      });
      const location = response.headers.get("X-Chat-Location");
      if (response.ok && location) {
        window.location.assign(location);
        return;
      }
      const plain = (response.headers.get("Content-Type") || "").startsWith("text/plain");
      newChatNotice(plain ? await response.text() : `That did not work (HTTP ${response.status}).`);
    } catch {
      newChatNotice("Sending failed: check the connection and try again.");
    }
    button.disabled = false;
  });

  // Where files dropped or pasted go: the conversation's composer, or the New chat form.
  function fileTarget(element) {
    const form = composer();
    if (form && form.contains(element) && attachInput()) return { form, add: upload };
    const fresh = newChatForm();
    if (fresh && fresh.contains(element) && newChatInput()) return { form: fresh, add: newChatAdd };
    return null;
  }

  document.addEventListener("change", (event) => {
    if (event.target === attachInput()) upload(event.target.files);
    else if (event.target === newChatInput()) newChatAdd(event.target.files);
  });

  document.addEventListener("paste", (event) => {
    const here = fileTarget(event.target);
    if (!here || !event.clipboardData) return;
    if (event.clipboardData.files.length === 0) return; // text pastes as usual
    event.preventDefault();
    here.add(event.clipboardData.files);
  });

  document.addEventListener("dragover", (event) => {
    const here = fileTarget(event.target);
    if (!here) return;
    event.preventDefault();
    here.form.setAttribute("data-dropping", "");
  });

  document.addEventListener("dragleave", (event) => {
    for (const form of [composer(), newChatForm()]) {
      if (form && !form.contains(event.relatedTarget)) form.removeAttribute("data-dropping");
    }
  });

  document.addEventListener("drop", (event) => {
    const here = fileTarget(event.target);
    if (!here || !event.dataTransfer) return;
    event.preventDefault();
    here.form.removeAttribute("data-dropping");
    here.add(event.dataTransfer.files);
  });

  document.addEventListener("DOMContentLoaded", () => {
    // The script uploads as soon as files are chosen: the no-script Upload button goes.
    for (const button of document.querySelectorAll(".attach-upload")) button.hidden = true;
  });

  // Code blocks of answers get a Copy button (a finished segment's markdown: not while its
  // text still streams in as plain text).
  function addCopyButtons(root) {
    if (!root || !root.querySelectorAll) return;
    const blocks = root.querySelectorAll(".segment:not(.streaming) pre, .answer pre, .member-answer pre");
    for (const pre of blocks) {
      if (pre.parentElement.classList.contains("code-block") || pre.classList.contains("json")) continue;
      const wrapper = document.createElement("div");
      wrapper.className = "code-block";
      const button = document.createElement("button");
      button.type = "button";
      button.className = "copy-code secondary";
      button.textContent = "Copy code";
      pre.replaceWith(wrapper);
      wrapper.append(button, pre);
    }
  }

  document.addEventListener("click", (event) => {
    const button = event.target.closest(".copy-code");
    if (!button) return;
    const pre = button.parentElement.querySelector("pre");
    navigator.clipboard.writeText(pre.textContent).then(
      () => {
        button.textContent = "Copied";
        setTimeout(() => (button.textContent = "Copy code"), 2000);
      },
      () => (button.textContent = "Copy failed"),
    );
  });

  document.addEventListener("htmx:load", (event) => {
    connectWithin(event.target);
    addCopyButtons(event.target);
  });
  document.addEventListener("DOMContentLoaded", () => {
    connectWithin(document.body);
    addCopyButtons(document.body);
  });
})();
